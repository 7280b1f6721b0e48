"""The admin page: server-rendered HTML and a little JavaScript, no build step.

The first view is rendered here; the script then refreshes it every two seconds from
``/api/admin/state`` (same origin, same credentials), closes scanners with
``POST /api/scanners/{id}/close`` and draws the throughput of the last ten minutes on a
canvas.
"""

from __future__ import annotations

from html import escape

from starscan import __version__

SCANNER_COLUMNS = ("context", "user", "table", "columns", "rows sent", "bytes sent", "throughput", "age", "idle",
                   "Spark jobs", "")
PLAN_COLUMNS = ("time", "user", "client", "table", "status", "ms", "tablets", "query id")
CONSUMER_COLUMNS = ("table", "consumer", "committed version", "table version", "lag (versions)", "lag (bytes)", "state")


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _scanner_rows(scanners: list[dict]) -> str:
    if not scanners:
        return f'<tr class="empty"><td colspan="{len(SCANNER_COLUMNS)}">no open scanners</td></tr>'
    out = []
    for s in scanners:
        cid = escape(s["context_id"])
        cells = [
            f'<td class="cid" title="{cid}">{cid[:8]}</td>', f"<td>{escape(str(s['user'] or '-'))}</td>",
            f"<td>{escape(str(s['table'] or '-'))}</td>", f"<td>{escape(', '.join(s['columns']))}</td>",
            f"<td class=num>{s['rows_sent']:,}</td>", f"<td class=num>{human_bytes(s['bytes_sent'])}</td>",
            f"<td class=num>{human_bytes(s['throughput_bytes_s'])}/s</td>", f"<td class=num>{s['age_s']:.0f} s</td>",
            f"<td class=num>{s['idle_s']:.0f} s</td>", f"<td>{escape(', '.join(map(str, s['spark_jobs'])) or '-')}</td>",
            f'<td><button class="close" data-id="{cid}">Close</button></td>',
        ]
        out.append(f'<tr data-id="{cid}" data-state="{escape(s["state"])}">{"".join(cells)}</tr>')
    return "\n".join(out)


def _plan_rows(plans: list[dict]) -> str:
    if not plans:
        return f'<tr class="empty"><td colspan="{len(PLAN_COLUMNS)}">no plans yet</td></tr>'
    out = []
    for p in plans:
        values = [p.get("ts"), p.get("user"), p.get("client"), p.get("table"), p.get("status"), p.get("duration_ms"),
                  p.get("tablets"), p.get("query_id")]
        title = escape(str(p.get("sql") or p.get("error") or ""))
        out.append(f'<tr title="{title}">' + "".join(f"<td>{escape(str(v if v is not None else '-'))}</td>" for v in values)
                   + "</tr>")
    return "\n".join(out)


def _consumer_cells(c: dict) -> list[str]:
    """A consumer row's cell texts (the script below builds the same)."""
    lag_v = "-" if c["lag_versions"] is None else f"{c['lag_versions']:,}"
    lag_b = "-" if c["lag_bytes"] is None else human_bytes(c["lag_bytes"])
    table_version = "-" if c["table_version"] is None else str(c["table_version"])
    return [c["table"], c["consumer"], str(c["committed_version"]), table_version, lag_v, lag_b, c["state"]]


def _consumer_rows(consumers: list[dict]) -> str:
    if not consumers:
        return f'<tr class="empty"><td colspan="{len(CONSUMER_COLUMNS)}">no consumers</td></tr>'
    return "\n".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in _consumer_cells(c)) + "</tr>" for c in consumers)


def _head(columns) -> str:
    return "<tr>" + "".join(f"<th>{escape(c)}</th>" for c in columns) + "</tr>"


STYLE = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em} h2{font-size:1.1em;margin-top:1.5em}
#spark.recovering,#spark.failed{color:#a40;font-weight:600}
table{border-collapse:collapse;width:100%} th,td{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left}
th{background:#f4f4f4} td.num{text-align:right;font-variant-numeric:tabular-nums} td.cid{font-family:monospace}
tr.empty td{color:#888;font-style:italic} button.close{color:#a00}
#chart{border:1px solid #ddd;width:100%;height:160px} .muted{color:#888}
"""

SCRIPT = r"""
const COLS = %(ncols)d;
function hb(n){const u=["B","KB","MB","GB","TB"];let i=0;while(Math.abs(n)>=1000&&i<u.length-1){n/=1000;i++}
  return i==0?n.toFixed(0)+" B":n.toFixed(1)+" "+u[i]}
function td(text,cls){const c=document.createElement("td");c.textContent=text;if(cls)c.className=cls;return c}
function renderScanners(list){
  const body=document.getElementById("scanners-body");body.replaceChildren();
  if(!list.length){const r=document.createElement("tr");r.className="empty";const c=td("no open scanners");c.colSpan=COLS;
    r.appendChild(c);body.appendChild(r);return}
  for(const s of list){
    const r=document.createElement("tr");r.dataset.id=s.context_id;r.dataset.state=s.state;
    const cid=td(s.context_id.slice(0,8),"cid");cid.title=s.context_id;r.appendChild(cid);
    r.appendChild(td(s.user||"-"));r.appendChild(td(s.table||"-"));r.appendChild(td(s.columns.join(", ")));
    r.appendChild(td(s.rows_sent.toLocaleString("en"),"num"));r.appendChild(td(hb(s.bytes_sent),"num"));
    r.appendChild(td(hb(s.throughput_bytes_s)+"/s","num"));r.appendChild(td(s.age_s.toFixed(0)+" s","num"));
    r.appendChild(td(s.idle_s.toFixed(0)+" s","num"));r.appendChild(td(s.spark_jobs.join(", ")||"-"));
    const b=document.createElement("button");b.className="close";b.textContent="Close";b.dataset.id=s.context_id;
    const c=document.createElement("td");c.appendChild(b);r.appendChild(c);body.appendChild(r)}
}
function renderPlans(list){
  const body=document.getElementById("plans-body");body.replaceChildren();
  if(!list.length){const r=document.createElement("tr");r.className="empty";const c=td("no plans yet");c.colSpan=8;
    r.appendChild(c);body.appendChild(r);return}
  for(const p of list){const r=document.createElement("tr");r.title=p.sql||p.error||"";
    for(const v of [p.ts,p.user,p.client,p.table,p.status,p.duration_ms,p.tablets,p.query_id])r.appendChild(td(v==null?"-":String(v)));
    body.appendChild(r)}
}
function renderConsumers(list){
  const body=document.getElementById("consumers-body");body.replaceChildren();
  if(!list.length){const r=document.createElement("tr");r.className="empty";const c=td("no consumers");c.colSpan=7;
    r.appendChild(c);body.appendChild(r);return}
  for(const c of list){const r=document.createElement("tr");
    for(const v of [c.table,c.consumer,String(c.committed_version),c.table_version==null?"-":String(c.table_version),
      c.lag_versions==null?"-":c.lag_versions.toLocaleString("en"),c.lag_bytes==null?"-":hb(c.lag_bytes),c.state])
      r.appendChild(td(v));
    body.appendChild(r)}
}
function drawChart(points){
  const cv=document.getElementById("chart");const w=cv.width=cv.clientWidth,h=cv.height=cv.clientHeight;
  const g=cv.getContext("2d");g.clearRect(0,0,w,h);
  const max=Math.max(1,...points.map(p=>p.bytes));
  g.strokeStyle="#2a6fdb";g.lineWidth=1.5;g.beginPath();
  points.forEach((p,i)=>{const x=i*(w-1)/Math.max(1,points.length-1),y=h-4-(p.bytes/max)*(h-20);i?g.lineTo(x,y):g.moveTo(x,y)});
  g.stroke();g.fillStyle="#555";g.font="12px system-ui";g.fillText("peak "+hb(max)+"/s",6,14);
  const last=points.slice(-10).reduce((a,p)=>a+p.bytes,0)/10;
  document.getElementById("rate").textContent=hb(last)+"/s over the last 10 s";
}
async function refresh(){
  try{const r=await fetch("/api/admin/state",{credentials:"same-origin"});if(!r.ok)throw new Error("HTTP "+r.status);
    const s=await r.json();renderScanners(s.scanners);renderPlans(s.recent_plans);renderConsumers(s.consumers||[]);drawChart(s.throughput);
    if(s.spark){const e=document.getElementById("spark");e.textContent="Spark: "+s.spark.state+" \u00b7 "+s.spark.message;e.className=s.spark.state.toLowerCase()}
    document.getElementById("status").textContent="updated "+new Date().toLocaleTimeString();
  }catch(e){document.getElementById("status").textContent="refresh failed: "+e.message}
}
document.addEventListener("click",async ev=>{
  const b=ev.target.closest("button.close");if(!b)return;b.disabled=true;
  const r=await fetch("/api/scanners/"+encodeURIComponent(b.dataset.id)+"/close",{method:"POST",credentials:"same-origin"});
  document.getElementById("status").textContent=r.ok?"closed "+b.dataset.id:"close failed: HTTP "+r.status;
  await refresh();
});
refresh();setInterval(refresh,2000);
"""


def _spark_line(spark: dict | None) -> str:
    """The node's Spark: UP, or RECOVERING while a new SparkSession starts after its JVM died."""
    if spark is None:
        return '<p id="spark"></p>'
    return (f'<p id="spark" class="{escape(spark["state"].lower())}">Spark: {escape(spark["state"])} &middot; '
            f'{escape(spark["message"])}</p>')


def render_page(user: str | None, state: dict | None, refused: str | None = None) -> str:
    if refused is not None:
        return (f"<!doctype html><html><head><meta charset=utf-8><title>starscan admin</title><style>{STYLE}</style></head>"
                f"<body><h1>starscan admin</h1><p id=refused>Refused: {escape(refused)}</p></body></html>")
    assert state is not None
    profiles = "on" if state.get("profiles_enabled") else "off"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>starscan admin</title><style>{STYLE}</style></head>
<body>
<h1>starscan admin <span class="muted">{escape(__version__)} &middot; signed in as {escape(user or '')}</span></h1>
{_spark_line(state.get("spark"))}
<p class="muted">Scan profiles are {profiles}. <a href="/metrics">/metrics</a> &middot; <a href="/varz">/varz</a>
&middot; <span id="status"></span></p>
<h2>Scanners</h2>
<table id="scanners"><thead>{_head(SCANNER_COLUMNS)}</thead><tbody id="scanners-body">
{_scanner_rows(state["scanners"])}
</tbody></table>
<h2>Throughput <span class="muted" id="rate"></span></h2>
<canvas id="chart"></canvas>
<h2>Consumers</h2>
<table id="consumers"><thead>{_head(CONSUMER_COLUMNS)}</thead><tbody id="consumers-body">
{_consumer_rows(state.get("consumers", []))}
</tbody></table>
<h2>Recent plans</h2>
<table id="plans"><thead>{_head(PLAN_COLUMNS)}</thead><tbody id="plans-body">
{_plan_rows(state["recent_plans"])}
</tbody></table>
<script>{SCRIPT % {"ncols": len(SCANNER_COLUMNS)}}</script>
</body></html>"""
