from starscan.app.cli import main

main()
