from starscan.cli import main

main()
