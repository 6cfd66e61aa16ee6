// The report page: plotly figures built from the JSON embedded in the page.
const D = JSON.parse(document.getElementById('report-data').textContent);
const layout = (title, extra) => Object.assign({title: {text: title}, margin: {t: 40, r: 20}, barmode: 'overlay'}, extra || {});
const cfg = {displaylogo: false, responsive: true};
function plot(id, traces, title, extra) {
  const el = document.getElementById(id);
  if (!el) return;
  if (!traces.length) { el.textContent = 'no data for this chart'; el.className = 'empty'; return; }
  Plotly.newPlot(el, traces, layout(title, extra), cfg);
}
plot('chart-rewards', D.collections.map(c => ({type: 'histogram', name: c.collection_id, x: c.rollout_rewards, opacity: 0.6})),
     'Final reward of each rollout, per collection', {xaxis: {title: {text: 'reward'}}, yaxis: {title: {text: 'rollouts'}}});
plot('chart-lengths', D.collections.flatMap(c => [
  {type: 'box', name: c.collection_id + ' prompt', y: c.prompt_len},
  {type: 'box', name: c.collection_id + ' response', y: c.response_len}]),
  'Prompt and response length (tokens) per call, per collection', {showlegend: false});
plot('chart-tokens', D.collections.length ? [
  {type: 'bar', name: 'prompt', x: D.collections.map(c => c.collection_id), y: D.collections.map(c => c.prompt_len.reduce((a, b) => a + b, 0))},
  {type: 'bar', name: 'response', x: D.collections.map(c => c.collection_id), y: D.collections.map(c => c.response_len.reduce((a, b) => a + b, 0))}] : [],
  'Tokens per collection (usable calls)', {barmode: 'stack'});
D.datasets.forEach((d, i) => {
  if (d.kind === 'preference') {
    plot('chart-margin-' + i, d.margins.length ? [{type: 'histogram', name: 'pairs', x: d.margins}] : [],
         d.ref + ': reward margin (chosen - rejected) of each pair', {xaxis: {title: {text: 'margin'}}, yaxis: {title: {text: 'pairs'}}});
    return;
  }
  const traces = [
    {type: 'histogram', name: 'rollouts in its collections', x: d.source_rollout_rewards, opacity: 0.5},
    {type: 'histogram', name: 'rows kept (train)', x: d.row_rewards, opacity: 0.7}];
  const shapes = d.cut === null ? [] : [{type: 'line', x0: d.cut, x1: d.cut, yref: 'paper', y0: 0, y1: 1, line: {dash: 'dash', color: 'red'}}];
  plot('chart-cut-' + i, traces, d.ref + ': rewards and the selection cut (lowest kept: ' + (d.cut === null ? 'none' : d.cut.toFixed(3)) + ')', {shapes: shapes});
});
const dropNames = [...new Set(D.datasets.flatMap(d => Object.keys(d.drops)))];
plot('chart-drops', dropNames.map(k => ({type: 'bar', name: k, x: D.datasets.map(d => d.ref), y: D.datasets.map(d => d.drops[k] || 0)})),
     'Why calls and rows were left out, per dataset version', {barmode: 'group'});
plot('chart-loss', D.runs.flatMap(r => r.curves.map(c => ({type: 'scatter', mode: 'lines+markers',
     name: r.run_id + ' ' + c.split, x: c.step, y: c.loss, line: {dash: c.split === 'train' ? 'solid' : 'dot'}}))),
     'Loss per step (train solid, eval dotted), all runs overlaid', {xaxis: {title: {text: 'step'}}, yaxis: {title: {text: 'loss'}}});
const dpoCurves = D.runs.flatMap(r => r.curves.filter(c => c.margin).map(c => ({r: r, c: c})));
if (dpoCurves.length) {
  plot('chart-dpo', dpoCurves.flatMap(({r, c}) => [
    {type: 'scatter', mode: 'lines+markers', name: r.run_id + ' ' + c.split + ' margin', x: c.step, y: c.margin},
    {type: 'scatter', mode: 'lines+markers', name: r.run_id + ' ' + c.split + ' accuracy', x: c.step, y: c.accuracy, yaxis: 'y2', line: {dash: 'dot'}}]),
    'DPO: reward margin (chosen - rejected) and accuracy per step', {xaxis: {title: {text: 'step'}}, yaxis2: {overlaying: 'y', side: 'right', range: [0, 1]}});
} else {
  const el = document.getElementById('chart-dpo');
  if (el) el.remove();
}
// plotly reads a few HTML tags in labels (<a href>, <b>, <br>); a rollout id is record text, so
// its angle brackets become look-alikes before plotly sees it.
const inert = s => String(s).replace(/</g, '\u2039').replace(/>/g, '\u203a');
(D.judges || []).forEach((j, i) => {
  const withStd = j.points.some(p => p.std !== null);
  plot('chart-judge-' + i, j.points.length ? [{type: 'scatter', mode: 'markers', name: 'rollouts',
    x: j.points.map(p => p.reward), y: j.points.map(p => p.score), text: j.points.map(p => inert(p.rollout_id)), hoverinfo: 'x+y+text',
    error_y: withStd ? {type: 'data', array: j.points.map(p => p.std === null ? 0 : p.std), visible: true} : undefined}] : [],
    j.ref + ': judge score against collected final reward', {xaxis: {title: {text: 'collected reward'}}, yaxis: {title: {text: 'judge score'}}});
  if (j.spread.length) {
    plot('chart-spread-' + i, [{type: 'histogram', name: 'rollouts', x: j.spread}],
         j.ref + ": the judge's spread (standard deviation over samples) per rollout",
         {xaxis: {title: {text: 'standard deviation'}}, yaxis: {title: {text: 'rollouts'}}});
  } else {
    const el = document.getElementById('chart-spread-' + i);
    if (el) el.remove();
  }
});
document.body.dataset.rendered = 'yes';
