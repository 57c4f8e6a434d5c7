"""The report as one self-contained HTML file: styles, script, plot library and data all inside it.

Nothing is fetched from the network, so the file opens from a laptop on a train. The timeline is drawn by
uPlot (vendored in `vendor/`, MIT licence, 51 KB minified: a canvas chart made for many points, with
zoom and a live legend), the breaker's states as bands behind the bars, the marks as dashed rules.

    Path("report.html").write_text(render_html(account))
"""

from __future__ import annotations

import json
from functools import lru_cache
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

from ralph_supervisor.format import dollars_share, duration, share, utc_time
from ralph_supervisor.report import verified
from ralph_supervisor.report.account import Account
from ralph_supervisor.report.markdown import box_of, worktree_of
from ralph_supervisor.report.rows import IterationRow
from ralph_supervisor.text import one_line

TABLE_ROWS = 1000
"""The iterations listed as table rows (the newest); the plot always holds every iteration."""
NOTE_CHARS = 90
KIND = {"ok": 0, "failed": 1, "usage": 2, "blocked": 3, "cut": 4}


@lru_cache(maxsize=1)
def _vendor() -> tuple[str, str]:
    folder = resources.files("ralph_supervisor.report") / "vendor"
    return (folder / "uPlot.iife.min.js").read_text("utf-8"), (folder / "uPlot.min.css").read_text("utf-8")


def _kind(row: IterationRow) -> int:
    if row.blocked:
        return KIND["blocked"]
    if row.usage_limited:
        return KIND["usage"]
    if row.cut_short:
        return KIND["cut"]
    if row.failed:
        return KIND["failed"]
    return KIND["ok"]


def _note(row: IterationRow) -> str:
    return one_line(row.first_error or row.action or row.reply, NOTE_CHARS)


def plot_data(a: Account) -> dict[str, Any]:
    """The timeline as column arrays (compact: a 1,000-iteration run is a few tens of KB)."""
    rows = a.iterations
    spent_tokens: list[int] = []
    spent_cost: list[float] = []
    tokens = 0
    cost = 0.0
    for r in rows:
        tokens += r.tokens or 0
        cost += r.cost_usd or 0.0
        spent_tokens.append(tokens)
        spent_cost.append(round(cost, 4))
    has_cost = any(r.cost_usd is not None for r in rows)
    return {
        "n": [r.number for r in rows],
        "files": [r.files_changed for r in rows],
        "commits": [r.commits for r in rows],
        "errors": [r.errors for r in rows],
        "kind": [_kind(r) for r in rows],
        "dur": [None if r.duration_s is None else round(r.duration_s, 1) for r in rows],
        "label": [r.label or r.outcome for r in rows],
        "note": [_note(r) for r in rows],
        "trial": [1 if r.trial else 0 for r in rows],
        "spent": spent_cost if has_cost else spent_tokens,
        "spentUnit": "dollars" if has_cost else "tokens",
        "budget": (a.spend.cost_budget if has_cost else a.spend.token_budget) or None,
        "bands": [[b.kind, round(b.x0, 3), round(b.x1, 3), b.text] for b in a.bands],
        "marks": [[m.kind, round(m.x, 3), one_line(m.text, 160)] for m in a.marks],
    }


def _script_json(data: Any) -> str:
    """JSON that cannot end its <script> element early."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/").replace("<!--", "<\\!--")


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _facts(a: Account) -> str:
    s = a.spend
    first = a.runs[0].started_at if a.runs else None
    last = a.runs[-1].ended_at if a.runs else None
    items = [
        ("wall time", duration(a.wall_s)),
        ("iterations", f"{s.iterations}" + (f" of {s.max_iterations}" if s.max_iterations else "")),
        ("tokens", share(s.tokens, s.token_budget)),
        ("dollars", dollars_share(s.cost_usd, s.cost_budget)),
        ("runs", f"{len(a.runs)}: {utc_time(first)} → {utc_time(last) if last else 'now'}"),
        ("workspace", a.workspace),
    ]
    if box_of(a):
        items.append(("box", box_of(a).replace("`", "")))
    if (w := worktree_of(a.state_dir)) is not None:
        items.append(("worktree", f"branch {w['branch']} of {w['checkout']}, kept for review"))
    if a.runs and a.runs[-1].exit_code is not None:
        items.append(("supervisor exit code", str(a.runs[-1].exit_code)))
    cells = []
    for label, value in items:
        meter = ""
        if label == "tokens" and s.token_budget > 0:
            meter = f'<meter min="0" max="{s.token_budget}" value="{min(s.tokens, s.token_budget)}"></meter>'
        if label == "dollars" and s.cost_budget > 0 and s.cost_usd is not None:
            meter = f'<meter min="0" max="{s.cost_budget}" value="{min(s.cost_usd, s.cost_budget)}"></meter>'
        cells.append(f"<div><dt>{_e(label)}</dt><dd>{_e(value)}{meter}</dd></div>")
    return '<dl class="facts">' + "".join(cells) + "</dl>"


def _table(rows: tuple[IterationRow, ...]) -> str:
    shown = rows[-TABLE_ROWS:]
    head = ("<tr><th>#</th><th>started</th><th>took</th><th>files</th><th>commits</th><th>errors</th>"
            "<th>tokens</th><th>outcome</th><th>note</th></tr>")
    body = []
    for r in shown:
        cls = ["k%d" % _kind(r)] + (["trial"] if r.trial else []) + (["tripped"] if r.tripped else [])
        if r.progress:
            cls.append("progress")
        took = duration(r.duration_s, "tenths")
        note = one_line(r.first_error or r.action, 160)
        if r.tripped:
            note = f"opened the breaker ({r.tripped}). {note}"
        body.append(
            f'<tr class="{" ".join(cls)}"><td>{r.number}</td><td>{_e(utc_time(r.started_at, "%H:%M:%S", otherwise=""))}</td><td>{took}</td>'
            f"<td>{r.files_changed}</td><td>{r.commits}</td><td>{r.errors}</td>"
            f"<td>{'?' if r.tokens is None else f'{r.tokens:,}'}</td><td>{_e(r.said)}</td>"
            f"<td>{_e(note)}</td></tr>")
    more = (f"<p class=dim>The newest {len(shown)} of {len(rows)} iterations; the plot shows them all.</p>"
            if len(rows) > len(shown) else "")
    table = f'<table class="iterations"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'
    return f'{more}<div class="scroll">{table}</div>'


def _sections(a: Account) -> str:
    out: list[str] = []
    g = a.git
    out.append("<section><h2>Commits and diffstat since the run began</h2>")
    if g.note:
        out.append(f"<p class=dim>Not available: {_e(g.note)}.</p>")
    else:
        out.append(f"<p>{g.total_commits} commit(s) since <code>{_e(g.base or 'the first commit')}</code>"
                   + (f": {_e(g.diffstat)}." if g.diffstat else ", no change in the tree.") + "</p>")
        if g.commits:
            out.append("<ul class=commits>" + "".join(f"<li><code>{_e(sha)}</code> {_e(subject)}</li>"
                                                   for sha, subject in g.commits) + "</ul>")
        if g.files:
            out.append("<pre>" + _e("\n".join(g.files)) + "</pre>")
        if g.uncommitted:
            out.append(f"<p>Not committed yet: {_e(g.uncommitted)}.</p>")
    out.append("</section>")

    out.append("<section><h2>Recurring errors</h2>")
    if a.errors:
        out.append("<table><thead><tr><th>count</th><th>first</th><th>last</th><th>signature</th></tr></thead><tbody>")
        out += [f"<tr><td>{e.count}</td><td>{e.first}</td><td>{e.last}</td><td><code>{_e(one_line(e.signature, 200))}"
                f"</code></td></tr>" for e in a.errors[:30]]
        out.append("</tbody></table>")
    else:
        out.append("<p class=dim>No error lines.</p>")
    out.append("</section><section><h2>Blockers the agent stated</h2>")
    if a.blockers:
        out.append("<ul>" + "".join(
            f"<li><b>{b.count}×</b> (iterations {b.first}–{b.last}) {_e(one_line(b.text, 300))}</li>"
            for b in a.blockers[:12]) + "</ul>")
    else:
        out.append("<p class=dim>None.</p>")
    out.append("</section><section><h2>The agent's last reply</h2>")
    if a.last_reply is None:
        out.append("<p class=dim>No reply recorded.</p>")
    else:
        out.append(f"<p class=dim>Iteration {a.last_reply.iteration}</p><blockquote>{_e(a.last_reply.text)}</blockquote>")
        if a.last_reply.status:
            out.append("<pre>---RALPH_STATUS---\n" + _e("\n".join(f"{k}: {v}" for k, v in a.last_reply.status.items()))
                       + "\n---END_RALPH_STATUS---</pre>")
    h = a.hygiene
    out.append("</section><section><h2>Process hygiene</h2><ul>"
               f"<li>Orphans swept at start: {h.orphans_swept}</li>"
               f"<li>Tree stops: {h.tree_stops}; survivors: <b>{'zero' if not h.survivors else h.survivors}</b></li>"
               "</ul></section>")
    out.append('<section class="decide"><h2>What a human should decide next</h2>')
    if a.residual is not None:
        out.append(f"<p>What is left is <b>{_e(a.residual.kind)}</b>"
                   + (": only a person can clear it." if a.residual.kind == "blocked" else ": another attempt may fix it.")
                   + "</p>")
        if a.residual.because:
            out.append("<ul>" + "".join(f"<li>{_e(one_line(item, 300))}</li>" for item in a.residual.because[:5]) + "</ul>")
    out.append(_markdown_list(a.decide))
    out.append(_markdown_list(a.next_steps))
    out.append("</section>")
    if a.warnings:
        out.append("<section class=warnings><h2>Warnings</h2><ul>"
                   + "".join(f"<li>{_e(w)}</li>" for w in a.warnings) + "</ul></section>")
    return "".join(out)


def _markdown_list(lines: tuple[str, ...]) -> str:
    """The shared Markdown bullets (from `escalation`) as HTML: `- ` items, `code` spans."""
    import re

    items = []
    for line in lines:
        text = line[2:] if line.startswith("- ") else line
        if not text.strip():
            continue
        html = re.sub(r"`([^`]*)`", lambda m: f"<code>{m.group(1)}</code>", _e(text))
        html = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", html)
        items.append(f"<li>{html}</li>" if line.startswith("- ") else f"<p>{html}</p>")
    return "<ul>" + "".join(items) + "</ul>" if items else ""


STYLE = """
:root{--ok:#2e9d4f;--bad:#d33a2c;--warn:#c98a00;--wait:#2878c8;--dim:#6b7280;--bg:#fff;--fg:#1f2328;--line:#e5e7eb}
*{box-sizing:border-box}body{margin:0;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:1280px;margin:0 auto;padding:20px 24px 60px}
header.verdict{border-left:8px solid var(--dim);padding:10px 18px;margin:0 0 16px;background:#f6f8fa;border-radius:6px}
header.verdict h1{font-size:14px;font-weight:600;margin:0;color:var(--dim);text-transform:uppercase;letter-spacing:.04em}
header.verdict .line{font-size:22px;font-weight:650;margin:4px 0}
header.verdict .why{margin:0;color:#374151}
.s-running,.s-finished{border-color:var(--ok)!important}.s-paused,.s-trial{border-color:var(--warn)!important}
.s-waiting{border-color:var(--wait)!important}.s-stopped{border-color:var(--bad)!important}
dl.facts{display:grid;grid-template-columns:repeat(auto-fit,minmax(210px,1fr));gap:8px 18px;margin:0 0 18px}
dl.facts div{border:1px solid var(--line);border-radius:6px;padding:6px 10px}dl.facts dt{font-size:12px;color:var(--dim)}
dl.facts dd{margin:0;font-weight:600;overflow-wrap:anywhere}meter{display:block;width:100%;height:8px}
h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
#timeline{width:100%;min-height:340px}#detail{min-height:1.5em;color:#374151;font-size:13px;margin:4px 0 8px}
.key span{display:inline-block;margin-right:14px;font-size:12px;color:#374151}.key i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px;border-radius:2px}
ul.marks{font-size:13px;columns:2;margin:6px 0}table{border-collapse:collapse;font-size:13px;width:100%}
th,td{border-bottom:1px solid var(--line);padding:3px 6px;text-align:left;vertical-align:top}th{position:sticky;top:0;background:#f6f8fa}
table.iterations td:nth-child(-n+7){text-align:right;white-space:nowrap}.scroll{max-height:480px;overflow:auto;border:1px solid var(--line)}
tr.progress td:nth-child(4){color:var(--ok);font-weight:600}tr.k1 td:nth-child(8),tr.k3 td:nth-child(8){color:var(--bad);font-weight:600}
tr.k2 td:nth-child(8){color:var(--wait)}tr.trial{background:#fff7e0}tr.tripped{background:#fdecea}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}pre{background:#f6f8fa;padding:8px;overflow:auto}
blockquote{margin:0;padding:6px 12px;border-left:4px solid var(--line);white-space:pre-wrap}.dim{color:var(--dim)}
.decide{background:#f6f8fa;padding:4px 16px 10px;border-radius:6px}.warnings{color:#8a4b00}
@media print{.scroll{max-height:none}}
"""

PLOT = r"""
(function(){
var D=JSON.parse(document.getElementById('report-data').textContent);
var el=document.getElementById('timeline'),detail=document.getElementById('detail');
var n=D.n.length;
if(!n||typeof uPlot==='undefined'){el.textContent=n?'The plot needs JavaScript.':'No iteration finished.';el.style.minHeight='0';return;}
var xs=[],up=[],err=[],lim=[],blk=[],cut=[];
for(var i=0;i<n;i++){
  xs.push(i);var k=D.kind[i],e=D.errors[i],c=D.files[i]+D.commits[i];
  up.push(c>0?c:null);
  err.push((k===1||(k===0&&e>0))?-Math.max(1,e):null);
  lim.push(k===2?-1:null);blk.push(k===3?-Math.max(1,e):null);cut.push(k===4?-1:null);
}
var BAND={OPEN:'rgba(211,58,44,0.28)',HALF_OPEN:'rgba(230,165,0,0.25)',PAUSED:'rgba(107,114,128,0.2)',LIMIT:'rgba(40,120,200,0.2)',OUTAGE:'rgba(120,60,200,0.18)'};
var MARK={open:'#d33a2c',final:'#8b0000',pause:'#6b7280',trial:'#c98a00',close:'#2e9d4f',reset:'#2e9d4f',limit_wait:'#2878c8',restart:'#6b7280',run_start:'#374151',exit:'#374151'};
function px(u,v){return u.valToPos(v,'x',true);}
function bands(u){var c=u.ctx,b=u.bbox,r=devicePixelRatio||1;c.save();
  for(var j=0;j<D.bands.length;j++){var a=D.bands[j],x0=px(u,a[1]),x1=px(u,a[2]);
    if(x1-x0<8*r){var m=(x0+x1)/2;x0=m-4*r;x1=m+4*r;}
    x0=Math.max(x0,b.left);x1=Math.min(x1,b.left+b.width);if(x1<=x0)continue;
    c.fillStyle=BAND[a[0]]||'rgba(0,0,0,0.08)';c.fillRect(x0,b.top,x1-x0,b.height);}
  c.restore();}
function marks(u){var c=u.ctx,b=u.bbox,r=devicePixelRatio||1;c.save();c.setLineDash([4*r,3*r]);c.lineWidth=r;
  for(var j=0;j<D.marks.length;j++){var m=D.marks[j],x=Math.round(px(u,m[1]));
    if(x<b.left||x>b.left+b.width)continue;c.strokeStyle=MARK[m[0]]||'#555';
    c.beginPath();c.moveTo(x,b.top);c.lineTo(x,b.top+b.height);c.stroke();}
  c.restore();}
function show(u){var i=u.cursor.idx;if(i==null){detail.textContent='Hover the plot for an iteration; drag to zoom, double-click to zoom out.';return;}
  var t='iteration '+D.n[i]+' \u00b7 '+D.label[i]+(D.trial[i]?' (trial)':'')+' \u00b7 '+(D.dur[i]==null?'?':D.dur[i]+' s')+' \u00b7 '+D.files[i]+' file(s), '+D.commits[i]+' commit(s), '+D.errors[i]+' error(s)';
  if(D.note[i])t+=' \u00b7 '+D.note[i];detail.textContent=t;}
var bars=uPlot.paths.bars({size:[0.8,48,1]});
function ticks(u,i,min,max){var t=[0],steps=[1,10,100,1000,10000];
  for(var j=0;j<steps.length;j++){if(steps[j]<=max)t.push(steps[j]);if(-steps[j]>=min)t.unshift(-steps[j]);}return t;}
function sym(u,min,max){var m=Math.max(Math.abs(min||0),Math.abs(max||0),1);return[-m*1.15,m*1.15];}
var top=Math.max.apply(null,D.spent.concat([D.budget||0,1]));
var far=D.bands.map(function(b){return b[2];}).concat(D.marks.map(function(m){return m[1];}));
var right=far.some(function(x){return x>=n-0.5;})?Math.max(n+0.2,Math.max.apply(null,far)):n-0.5;
var opts={width:Math.max(320,el.clientWidth),height:340,
 scales:{x:{time:false,range:[-0.5,right]},y:{distr:4,asinh:1,range:sym},spend:{range:[0,top*1.05]}},
 axes:[{label:'iteration',values:function(u,s){return s.map(function(v){return (v>=0&&v<n&&v===Math.round(v))?D.n[v]:'';});}},
       {label:'files changed \u2191   errors \u2193',splits:ticks,values:function(u,s){return s.map(function(v){return v==null?"":Math.abs(v);});}},
       {scale:'spend',side:1,grid:{show:false},label:D.spentUnit+' spent',size:70}],
 series:[{label:'iteration',value:function(u,v){return v==null?'-':D.n[v];}},
  {label:'files changed',fill:'rgba(46,157,79,0.85)',stroke:'#2e9d4f',paths:bars,points:{show:false},fillTo:0,value:function(u,v){return v==null?0:v;}},
  {label:'errors / failed',fill:'rgba(211,58,44,0.85)',stroke:'#d33a2c',paths:bars,points:{show:false},fillTo:0,value:function(u,v){return v==null?0:-v;}},
  {label:'usage limit',fill:'rgba(40,120,200,0.85)',stroke:'#2878c8',paths:bars,points:{show:false},fillTo:0,value:function(u,v){return v==null?'-':'yes';}},
  {label:'blocked',fill:'rgba(120,30,140,0.85)',stroke:'#781e8c',paths:bars,points:{show:false},fillTo:0,value:function(u,v){return v==null?'-':'yes';}},
  {label:'cut short',fill:'rgba(107,114,128,0.7)',stroke:'#6b7280',paths:bars,points:{show:false},fillTo:0,value:function(u,v){return v==null?'-':'yes';}},
  {label:D.spentUnit+' spent',scale:'spend',stroke:'#6c4fc4',width:1.5,points:{show:false}}],
 cursor:{drag:{x:true,y:false}},legend:{show:false},
 hooks:{drawClear:[bands],draw:[marks],setCursor:[show]}};
var u=new uPlot(opts,[xs,up,err,lim,blk,cut,D.spent],el);show(u);
window.addEventListener('resize',function(){u.setSize({width:Math.max(320,el.clientWidth),height:340});});
})();
"""


def _marks_list(a: Account) -> str:
    if not a.marks:
        return ""
    items = []
    for m in a.marks[-60:]:
        where = f"iteration {m.iteration}" if m.iteration is not None else f"after {max(0, int(m.x + 0.5))} iterations"
        items.append(f'<li><span class="m-{_e(m.kind)}">{_e(utc_time(m.at, "%H:%M:%S"))}</span> ({_e(where)}): '
                     f"{_e(one_line(m.text, 200))}</li>")
    return '<ul class="marks">' + "".join(items) + "</ul>"


KEY = ('<div class="key"><span><i style="background:#2e9d4f"></i>files changed</span>'
       '<span><i style="background:#d33a2c"></i>errors, failed call</span>'
       '<span><i style="background:#2878c8"></i>usage limit</span><span><i style="background:#781e8c"></i>blocked</span>'
       '<span><i style="background:rgba(211,58,44,0.3)"></i>breaker OPEN</span>'
       '<span><i style="background:rgba(230,165,0,0.4)"></i>HALF_OPEN (trial)</span>'
       '<span><i style="background:rgba(40,120,200,0.35)"></i>usage-limit wait</span>'
       '<span><i style="background:rgba(120,60,200,0.3)"></i>API outage</span>'
       '<span><i style="background:rgba(107,114,128,0.35)"></i>paused by hand</span></div>')


def render_html(a: Account) -> str:
    """The whole report as one HTML document."""
    script, css = _vendor()
    v = a.verdict
    why = f'<p class="why">Why: {_e(one_line(v.reason, 400))}</p>' if v.reason and v.status not in ("running", "finished") else ""
    return "".join([
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        '<meta name="viewport" content="width=device-width,initial-scale=1">',
        f"<title>ralph-supervise: {_e(a.name)} — {_e(v.status)}</title>",
        f"<style>{css}{STYLE}</style></head><body><main>",
        f'<header class="verdict s-{_e(v.status)}"><h1>ralph-supervise report · {_e(a.name)}</h1>',
        f'<p class="line">{_e(v.line)}</p>{why}',
        "".join(f'<p class="why">{_e(line)}</p>' for line in a.waits), "</header>",
        _facts(a),
        "<section><h2>Timeline</h2>", KEY,
        '<div id="timeline"></div><div id="detail"></div>',
        "<noscript><p>The plot needs JavaScript; the table below holds the same facts.</p></noscript>",
        _marks_list(a), "</section>",
        "<section><h2>Iterations</h2>", _table(a.iterations), "</section>",
        verified.section(verified.read_points(Path(a.state_dir)), a.iterations) if a.state_dir else "",
        _sections(a),
        f'<p class="dim">Written {_e(utc_time(a.generated_at))} from {_e(a.state_dir)}.</p>',
        "</main>",
        f"<script>{script}</script>",
        f'<script type="application/json" id="report-data">{_script_json(plot_data(a))}</script>',
        f"<script>{PLOT}</script>",
        "</body></html>\n",
    ])
