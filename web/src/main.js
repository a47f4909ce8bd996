// The dashboard: six pages behind a hash router (#/idle, #/why, #/eta, #/queues, #/profiles, #/gpus),
// each a function that fetches from /api/v1 and renders into <main>.
import './style.css'
import { get, post } from './api.js'
import {
  STATE_COLORS, STATE_TITLES, REASON_COLORS, stackedArea, stackedBars, stackedColumns, lines, groupedBars, fmtTime,
} from './charts.js'

const STATES = ['busy', 'allocated_idle', 'unallocated_waiting', 'spare']
const main = document.getElementById('page')
const filtersForm = document.getElementById('filters')
let charts = []

const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]))
const h1 = (x) => Number(x).toFixed(1)
const pct = (x) => (100 * x).toFixed(1) + '%'
const ts = (iso) => (iso ? new Date(iso).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '—')
function dur(sec) {
  sec = Math.round(sec)
  const h = Math.floor(sec / 3600), m = Math.floor((sec % 3600) / 60), s = sec % 60
  if (h) return `${h}h${String(m).padStart(2, '0')}m`
  if (m) return `${m}m${String(s).padStart(2, '0')}s`
  return `${s}s`
}

function filters() {
  const f = Object.fromEntries(new FormData(filtersForm))
  const out = { ...f }
  if (f.range === 'all') out.from = '-400d'
  else out.from = f.range
  delete out.range
  return out
}

function clear() {
  charts.forEach((c) => c.destroy())
  charts = []
  main.innerHTML = ''
}

// Pages render one at a time: one still waiting for the API when the user
// moves on finishes first, then the next clears it. Interleaved, both would
// write into the same elements and canvases.
let rendering = Promise.resolve()
function route() {
  rendering = rendering.then(renderRoute)
}

function renderRoute() {
  const hash = location.hash || '#/idle'
  const [path, qs] = hash.slice(1).split('?')
  const page = path.split('/')[1] || 'idle'
  document.querySelectorAll('nav a').forEach((a) => a.classList.toggle('active', a.dataset.page === page))
  clear()
  const params = new URLSearchParams(qs || '')
  const render = { idle: idlePage, why: whyPage, eta: etaPage, queues: queuesPage, profiles: profilesPage, gpus: gpusPage }[page] || idlePage
  main.dataset.page = page
  main.dataset.ready = 'false'
  return render(params).then(
    () => { main.dataset.ready = 'true' },
    (err) => {
      main.insertAdjacentHTML('beforeend', `<p class="error" data-testid="error">${esc(err.message)}</p>`)
      main.dataset.ready = 'true'
    },
  )
}

// ---------------------------------------------------------------- queues page

// A job's wait is coloured as the why page colours it: waiting for Kueue's
// quota, or for capacity (GPUs) once its quota is reserved or outside Kueue.
const WAIT_COLORS = { quota: REASON_COLORS.quota, capacity: REASON_COLORS.insufficient_gpu }
const QUEUE_KINDS = { 'cluster-queue': 'ClusterQueue', 'local-queue': 'LocalQueue (ClusterQueue not known)', label: 'queue label' }

function queueCard(q) {
  const s = q.spec
  const quota = s
    ? ` · nominal <span data-testid="queue-nominal" data-gpus="${s.nominal_gpus}">${fmtNum(s.nominal_gpus)}</span> GPUs` +
      ` · borrowed <span data-testid="queue-borrowed" data-gpus="${s.borrowed_gpus}">${fmtNum(s.borrowed_gpus)}</span>` +
      ` (Kueue reports ${fmtNum(s.reserved_gpus)} reserved)<br><small data-testid="queue-borrowing">${esc(s.borrowing)}` +
      `${s.cohort ? ` · fair-sharing weight ${fmtNum(s.fair_weight)} · reclaim within cohort: ${esc(s.reclaim_within_cohort || 'Never')}` : ''}</small>`
    : ' · borrowed: <span data-testid="queue-borrowed">unknown (spec not stored)</span>'
  const use = q.used_gpus !== undefined
    ? ` · <span data-testid="queue-used" data-gpus="${q.used_gpus}">${fmtNum(q.used_gpus)} GPUs held by ${q.admitted_workloads} admitted workload${q.admitted_workloads === 1 ? '' : 's'}</span>${quota}`
    : ''
  // Kueue charges every resource its ClusterQueue sets quota on, cpu and
  // memory as well as GPUs: one row per flavour and resource, as Kueue's
  // status last reported it.
  const amount = (r, v) => v === undefined ? 'none' : r.resource === 'memory' ? `${fmtNum(v / 2 ** 30)}Gi` : fmtNum(v)
  const quotaRows = s && s.quotas.length
    ? `<table data-testid="queue-quotas"><thead><tr><th>resource</th><th>flavour</th><th class="num">nominal</th>
      <th class="num">reserved</th><th class="num">borrowed</th><th class="num">borrowing limit</th><th class="num">lending limit</th></tr></thead><tbody>
      ${s.quotas.map((r) => `<tr data-resource="${esc(r.resource)}" data-flavor="${esc(r.flavor)}"><td>${esc(r.resource)}</td><td>${esc(r.flavor)}</td>
        <td class="num" data-testid="quota-nominal">${amount(r, r.nominal)}</td><td class="num" data-testid="quota-reserved">${amount(r, r.reserved)}</td>
        <td class="num" data-testid="quota-borrowed">${amount(r, r.borrowed)}</td>
        <td class="num">${amount(r, r.borrowing_limit)}</td><td class="num">${amount(r, r.lending_limit)}</td></tr>`).join('')}</tbody></table>`
    : ''
  const rows = q.pending.map((j) => `<tr data-uid="${esc(j.uid)}" data-wait="${esc(j.wait)}">
      <td class="num" data-testid="queue-position">${j.position}</td>
      <td><a href="#/why?kind=job&q=${encodeURIComponent(j.uid)}">${esc(j.namespace)}/${esc(j.name)}</a></td>
      <td class="num">${j.priority}</td>
      <td class="num">${fmtNum(j.gpus)}${j.members > 1 ? ` <small>(${j.members} members)</small>` : ''}</td>
      <td title="${esc(ts(j.created))}">${dur(j.waiting_seconds)}</td>
      <td><span class="badge" data-testid="queue-wait" style="background:${WAIT_COLORS[j.wait] || '#555'};color:#fff">${esc(j.wait)}</span></td></tr>`).join('')
  return `<section class="card" data-testid="queue" data-queue="${esc(q.name)}" data-kind="${esc(q.kind)}">
    <h2>${esc(q.name)} <small>${esc(QUEUE_KINDS[q.kind] || q.kind)}</small></h2>
    <p class="note">${q.pending.length} waiting, ${fmtNum(q.pending_gpus)} GPUs asked${use}</p>
    ${quotaRows}
    ${q.pending.length ? `<table><thead><tr><th class="num">#</th><th>job</th><th class="num">priority</th><th class="num">GPUs</th>
      <th>waiting</th><th>waits for</th></tr></thead><tbody>${rows}</tbody></table>` : ''}</section>`
}

async function queuesPage() {
  const a = await get('/queues')
  const f = filters()
  const queues = a.queues.filter((q) => !f.queue || q.name === f.queue)
  main.innerHTML = `<h1>Queues</h1>
    <p class="note" data-testid="queues-summary">as of ${ts(a.at)}, in the order profile <b>${esc(a.profile)}</b> tries them
      (${esc(a.order)}${a.starvation_bound_seconds ? `, starvation bound ${dur(a.starvation_bound_seconds)}` : ''}).
      ${Object.entries(WAIT_COLORS).map(([k, c]) => `<span class="badge" style="background:${c};color:#fff">${k}</span>`).join(' ')}
      ${a.order_note ? `<br>${esc(a.order_note)}` : ''}${a.quota_note ? `<br><span data-testid="quota-note">${esc(a.quota_note)}</span>` : ''}</p>
    ${a.quota_recommendation ? recommendationCard(a.quota_recommendation) : ''}
    ${queues.map(queueCard).join('') || '<p>no queue has waiting jobs or admitted workloads</p>'}`
}

// The tuner's latest ClusterQueue quota proposal: published for the
// operator to apply, with the replayed waits before and after.
function recommendationCard(r) {
  if (!r.changes.length) {
    return `<section class="card" data-testid="quota-recommendation"><h2>Kueue quota</h2>
      <p class="note">as of ${ts(r.created)}: no nominal quota move shortens the ${r.jobs} jobs' replayed wait for quota</p></section>`
  }
  const rows = r.changes.map((c) => `<tr><td>${esc(c.cluster_queue)}</td><td>${esc(c.resource)} on ${esc(c.flavor)}</td>
      <td class="num">${fmtNum(c.from)}</td><td class="num" data-testid="quota-to">${fmtNum(c.to)}</td></tr>`).join('')
  return `<section class="card" data-testid="quota-recommendation"><h2>Kueue quota proposal <small>apply it yourself; schedloop does not</small></h2>
    <p class="note">as of ${ts(r.created)}, replayed over ${r.jobs} jobs behind Kueue: time waiting for quota
      ${dur(r.quota_wait_before_seconds)} → ${dur(r.quota_wait_after_seconds)}, mean wait to start
      ${dur(r.mean_wait_before_seconds)} → ${dur(r.mean_wait_after_seconds)}</p>
    <table><thead><tr><th>ClusterQueue</th><th>quota</th><th class="num">nominal now</th><th class="num">proposed</th></tr></thead>
      <tbody>${rows}</tbody></table>
    <pre data-testid="quota-patch">${esc(r.patch)}</pre></section>`
}

// ---------------------------------------------------------------- GPUs page

// The inventory: each GPU, and a partitioned GPU's MIG instances under it
// with their share of its compute (the weight the idle split gives them).
async function gpusPage() {
  const f = filters()
  const g = await get('/gpus', { node: f.node, limit: 500 })
  const rows = g.gpus.map((x) => {
    const head = `<tr class="gpu" data-uuid="${esc(x.uuid)}"><td>${esc(x.node)}</td><td class="num">${x.index}</td>
      <td>${esc(x.uuid)}</td><td>${esc(x.model)}</td>
      <td>${x.instances.length ? `MIG, ${x.instances.length} instance${x.instances.length > 1 ? 's' : ''}` : 'whole GPU'}</td></tr>`
    // An instance NVIDIA's DRA driver publishes has no GPU instance id
    // until telemetry names it; its MIG UUID is what identifies it then.
    const inst = x.instances.map((i) => `<tr class="instance" data-uuid="${esc(x.uuid)}" data-instance="${esc(i.id)}" data-mig-uuid="${esc(i.mig_uuid || '')}">
      <td></td><td></td><td class="indent">└ ${i.id ? `instance ${esc(i.id)}` : `${esc(i.mig_uuid)} <small>(no GPU instance id yet)</small>`}</td><td>${esc(i.profile)}</td>
      <td data-testid="instance-share">${pct(i.compute_share)} of the GPU</td></tr>`).join('')
    return head + inst
  }).join('')
  main.innerHTML = `
    <h1>GPUs</h1>
    <section class="card"><h2>Inventory <small>MIG instances under their GPU, counted in idle time by their share of its compute</small></h2>
      <table data-testid="gpus"><thead><tr><th>node</th><th class="num">index</th><th>UUID</th><th>model / profile</th><th></th></tr></thead>
      <tbody>${rows || '<tr><td colspan="5">no GPU recorded yet</td></tr>'}</tbody></table>
      ${g.truncated ? '<p><small>more GPUs than shown: filter by node</small></p>' : ''}</section>`
}

// ---------------------------------------------------------------- idle page

async function idlePage() {
  const f = filters()
  main.innerHTML = `
    <h1>GPU idle time</h1>
    <p class="range" data-testid="range"></p>
    <section class="kpis" data-testid="kpis"></section>
    <section class="card"><h2>GPU time by category</h2><div class="chart tall"><canvas id="c-series"></canvas></div></section>
    <section class="card">
      <h2>By <select id="group-by">
        <option value="node">node</option><option value="namespace">namespace</option><option value="queue">queue</option>
        <option value="gpu_model">GPU model</option><option value="cluster">cluster</option></select>
        <small>most wasted first</small></h2>
      <div class="chart" id="groups-wrap"><canvas id="c-groups"></canvas></div>
    </section>
    <section class="card"><h2>Idle share per node over time <small>darker = more GPU time wasted</small></h2>
      <div id="heatmap" data-testid="heatmap"></div><button id="more-nodes" hidden>more nodes</button></section>
    <section class="card"><h2>Top idle holders <small>jobs keeping GPUs allocated but idle</small></h2>
      <table data-testid="holders"><thead><tr><th>job / pod</th><th>queue</th><th>pods</th><th>nodes</th>
      <th class="num">idle GPU-h</th><th class="num">busy GPU-h</th><th class="num">idle share</th></tr></thead><tbody></tbody></table>
      <button id="more-holders" hidden>more</button></section>`
  const [summary] = await Promise.all([get('/idle', f)])
  const r = summary.range
  const rangeEl = main.querySelector('[data-testid=range]')
  rangeEl.dataset.from = r.from
  rangeEl.dataset.to = r.to
  rangeEl.textContent = `${ts(r.from)} → ${ts(r.to)}, step ${r.step}; ${h1(summary.gpu_hours)} GPU-hours in all`
  const total = summary.gpu_hours || 1
  main.querySelector('.kpis').innerHTML =
    `<div class="kpi wasted"><div class="v" data-testid="idle-share">${pct(summary.idle_share)}</div>
       <div class="l">wasted (allocated idle + unallocated while waiting)</div></div>` +
    STATES.map((s) => `<div class="kpi" style="border-color:${STATE_COLORS[s]}">
       <div class="v"><span data-testid="total-${s}">${h1(summary.totals[s])}</span> <small>GPU-h</small></div>
       <div class="l">${STATE_TITLES[s]} · ${pct(summary.totals[s] / total)}</div></div>`).join('')
  charts.push(stackedArea(main.querySelector('#c-series'), summary.series, STATES,
    { colors: STATE_COLORS, titles: STATE_TITLES, step: r.step, yTitle: `GPU-hours per ${r.step === '1d' ? 'day' : 'hour'}` }))

  const groupSel = main.querySelector('#group-by')
  let groupChart
  async function drawGroups() {
    const g = await get('/idle/groups', { ...f, group_by: groupSel.value, limit: 15 })
    if (groupChart) groupChart.destroy()
    const wrap = main.querySelector('#groups-wrap')
    wrap.style.height = Math.max(120, 28 * g.groups.length + 60) + 'px'
    groupChart = stackedBars(main.querySelector('#c-groups'), g.groups, STATES, {
      colors: STATE_COLORS, titles: STATE_TITLES, xTitle: 'GPU-hours',
      labelOf: (x) => `${x.key || '(none)'} · ${pct(x.idle_share)} wasted`,
    })
    charts.push(groupChart)
  }
  groupSel.addEventListener('change', drawGroups)

  let heatCursor = ''
  const heat = main.querySelector('#heatmap')
  const moreNodes = main.querySelector('#more-nodes')
  async function drawHeat() {
    const hm = await get('/idle/heatmap', { ...f, limit: 40, cursor: heatCursor })
    if (!heat.firstChild) {
      heat.insertAdjacentHTML('beforeend', `<div class="hrow axis"><span class="hname">node</span>
        <span class="hcells">${hm.buckets.map((b, i) => `<i title="${esc(fmtTime(b, hm.range.step))}">${i % Math.ceil(hm.buckets.length / 8) === 0 ? esc(fmtTime(b, hm.range.step)) : ''}</i>`).join('')}</span></div>`)
    }
    for (const n of hm.nodes) {
      const cells = n.idle_share.map((v, i) => {
        const title = `${n.node} ${fmtTime(hm.buckets[i], hm.range.step)}: ` + (v === null ? 'no data' : `${pct(v)} wasted of ${h1(n.gpu_hours[i])} GPU-h`)
        const bg = v === null ? '#eee' : `rgba(198,40,40,${0.08 + 0.92 * v})`
        return `<i style="background:${bg}" title="${esc(title)}"></i>`
      }).join('')
      heat.insertAdjacentHTML('beforeend', `<div class="hrow" data-node="${esc(n.node)}"><span class="hname" title="${esc(n.gpu_model)}">${esc(n.node)}</span><span class="hcells">${cells}</span></div>`)
    }
    heatCursor = hm.next_cursor
    moreNodes.hidden = !heatCursor
  }
  moreNodes.addEventListener('click', drawHeat)

  let holderCursor = ''
  const tbody = main.querySelector('[data-testid=holders] tbody')
  const moreHolders = main.querySelector('#more-holders')
  async function drawHolders() {
    const hs = await get('/idle/holders', { ...f, limit: 15, cursor: holderCursor })
    for (const x of hs.holders) {
      const who = x.kind === 'job' ? `<a href="#/why?kind=job&q=${encodeURIComponent(x.job_uid)}">${esc(x.namespace)}/${esc(x.name)}</a>`
        : `<a href="#/why?kind=pod&q=${encodeURIComponent(x.namespace + '/' + x.name)}">${esc(x.namespace)}/${esc(x.name)}</a> <small>(pod)</small>`
      tbody.insertAdjacentHTML('beforeend', `<tr data-job="${esc(x.job_uid || '')}"><td>${who}</td><td>${esc(x.queue)}</td><td>${x.pods}</td><td>${x.nodes}</td>
        <td class="num" data-testid="holder-idle">${h1(x.idle_gpu_hours)}</td><td class="num">${h1(x.busy_gpu_hours)}</td><td class="num">${pct(x.idle_share)}</td></tr>`)
    }
    if (!tbody.children.length) tbody.innerHTML = '<tr><td colspan="7">no GPU was held idle in this range</td></tr>'
    holderCursor = hs.next_cursor
    moreHolders.hidden = !holderCursor
  }
  moreHolders.addEventListener('click', drawHolders)
  await Promise.all([drawGroups(), drawHeat(), drawHolders()])
}

// ----------------------------------------------------------------- why page

async function whyPage(params) {
  const q = params.get('q') || ''
  const kind = params.get('kind') || ''
  main.innerHTML = `
    <h1>Why did it wait?</h1>
    <form id="search" class="search"><input name="q" size="40" placeholder="pod or job: namespace/name, name or UID" value="${esc(q)}" data-testid="search-input">
      <button type="submit">search</button></form>
    <div id="results"></div>
    <div id="story"></div>
    <section class="card"><h2>Reservations standing now <small>nodes held for a job ahead that cannot start yet; others may use them only if predicted to end before its start</small></h2>
      <table data-testid="reservations"><thead><tr><th>job</th><th class="num">GPUs</th><th>nodes</th><th>domain</th><th>predicted start</th><th>held since</th></tr></thead><tbody></tbody></table>
    </section>
    <section class="card"><h2>Top wait reasons across the cluster <small>pod-hours spent waiting, by reason</small></h2>
      <div class="split wide-first"><div class="chart"><canvas id="c-reasons"></canvas></div>
      <table data-testid="reason-totals"><thead><tr><th>reason</th><th class="num">pod-hours</th><th class="num">share</th></tr></thead><tbody></tbody></table></div>
    </section>`
  main.querySelector('#search').addEventListener('submit', (e) => {
    e.preventDefault()
    const v = new FormData(e.target).get('q').trim()
    location.hash = '#/why?q=' + encodeURIComponent(v)
  })
  const tasks = [clusterReasons(), reservations()]
  if (q) tasks.push(showQuery(q, kind))
  await Promise.all(tasks)
}

async function clusterReasons() {
  const f = filters()
  delete f.node
  delete f.gpu_model
  const r = await get('/wait/reasons', f)
  const cats = r.totals.map((t) => t.category)
  const titles = Object.fromEntries(r.totals.map((t) => [t.category, t.title]))
  const tbody = main.querySelector('[data-testid=reason-totals] tbody')
  tbody.innerHTML = r.totals.map((t) => `<tr data-category="${esc(t.category)}"><td><i class="sw" style="background:${REASON_COLORS[t.category] || '#555'}"></i>${esc(t.title)}</td>
    <td class="num" data-testid="reason-${esc(t.category)}">${h1(t.pod_hours)}</td><td class="num">${pct(t.share)}</td></tr>`).join('') ||
    '<tr><td colspan="3">no pod waited in this range</td></tr>'
  charts.push(stackedColumns(main.querySelector('#c-reasons'), r.series.map((p) => ({ t: p.t, values: p.pod_hours })), cats,
    { colors: REASON_COLORS, titles, step: r.range.step, yTitle: 'pod-hours waiting' }))
}

async function reservations() {
  const r = await get('/reservations')
  const tbody = main.querySelector('[data-testid=reservations] tbody')
  tbody.innerHTML = r.reservations.map((x) => `<tr data-job="${esc(x.job)}">
    <td><a href="#/why?q=${encodeURIComponent(x.job)}">${esc(x.job)}</a></td><td class="num">${x.gpus || ''}</td>
    <td>${x.nodes.map(esc).join(' ')}</td>
    <td>${Object.entries(x.domain || {}).map(([k, v]) => `${esc(k)}=${esc(v)}`).join('<br>')}</td>
    <td>${ts(x.start)}</td><td>${ts(x.since)}</td></tr>`).join('') ||
    '<tr><td colspan="6">no reservation stands</td></tr>'
}

async function showQuery(q, kind) {
  const results = main.querySelector('#results')
  try {
    const story = await get('/why', { q, kind })
    renderStory(story)
  } catch (err) {
    if (err.status !== 404 && err.status !== 400) throw err
    const found = await get('/search', { q, limit: 20 }).catch(() => ({ results: [] }))
    results.innerHTML = `<p class="note">${esc(err.message)}</p>` + (found.results.length
      ? `<ul class="results" data-testid="results">${found.results.map((m) =>
        `<li><a href="#/why?kind=${m.kind}&q=${encodeURIComponent(m.uid)}">${m.kind} ${esc(m.namespace)}/${esc(m.name)}</a> <small>${esc(m.phase)}, created ${ts(m.created)}</small></li>`).join('')}</ul>`
      : '')
  }
}

function renderStory(s) {
  const el = main.querySelector('#story')
  const span = Math.max((s.timeline.length ? new Date(s.timeline[s.timeline.length - 1].end) : new Date(s.created)) - new Date(s.created), 1)
  const bar = s.timeline.map((iv) => {
    const left = (100 * (new Date(iv.start) - new Date(s.created))) / span
    const width = Math.max((100 * iv.seconds * 1000) / span, 0.3)
    const color = iv.state === 'running' ? STATE_COLORS.busy : (REASON_COLORS[iv.category] || '#555')
    return `<span style="left:${left}%;width:${width}%;background:${color}" title="${esc(iv.label)} (${dur(iv.seconds)})"></span>`
  }).join('')
  el.innerHTML = `
    <section class="card" data-testid="story" data-uid="${esc(s.uid)}">
      <h2>${s.kind} ${esc(s.namespace)}/${esc(s.name)} <small>uid ${esc(s.uid)} · ${esc(s.phase)}${s.queue ? ' · queue ' + esc(s.queue) : ''}${s.gpus ? ' · ' + s.gpus + ' GPUs' : ''}${s.node ? ' · ' + esc(s.node) : ''}</small></h2>
      <p>created ${ts(s.created)} · waited <b data-testid="wait-total" data-seconds="${s.wait_seconds}">${dur(s.wait_seconds)}</b>
        ${s.run_seconds ? ' · ran ' + dur(s.run_seconds) : ''}${s.gate_pod ? ` · the gang started when its last member <b>${esc(s.gate_pod)}</b> was bound` : ''}</p>
      <div class="gantt" aria-label="timeline">${bar}</div>
      <div class="split">
        <table data-testid="breakdown"><thead><tr><th>waiting for</th><th class="num">time</th><th class="num">seconds</th><th class="num">share</th></tr></thead><tbody>
        ${s.breakdown.map((b) => `<tr data-category="${esc(b.category)}"><td><i class="sw" style="background:${REASON_COLORS[b.category] || '#555'}"></i>${esc(b.title)}</td>
          <td class="num">${dur(b.seconds)}</td><td class="num" data-testid="breakdown-${esc(b.category)}">${Math.round(b.seconds)}</td><td class="num">${pct(b.share)}</td></tr>`).join('')}
        </tbody></table>
        <div class="chart"><canvas id="c-activity"></canvas></div>
      </div>
      <h3>Timeline</h3>
      <table data-testid="timeline"><thead><tr><th>from</th><th class="num">after</th><th class="num">for</th><th>what</th></tr></thead><tbody>
        ${s.timeline.map((iv) => `<tr class="${iv.state}"><td>${ts(iv.start)}</td><td class="num">+${dur((new Date(iv.start) - new Date(s.created)) / 1000)}</td>
          <td class="num">${dur(iv.seconds)}</td><td><i class="sw" style="background:${iv.state === 'running' ? STATE_COLORS.busy : (REASON_COLORS[iv.category] || '#555')}"></i>${esc(iv.label)}</td></tr>`).join('')}
      </tbody></table>
      ${s.members && s.members.length ? `<h3>Members</h3><table><thead><tr><th>pod</th><th>phase</th><th>node</th><th class="num">waited</th></tr></thead><tbody>
        ${s.members.map((m) => `<tr><td><a href="#/why?kind=pod&q=${encodeURIComponent(m.uid)}">${esc(m.name)}</a></td><td>${esc(m.phase)}</td><td>${esc(m.node)}</td><td class="num">${dur(m.wait_seconds)}</td></tr>`).join('')}
      </tbody></table>` : ''}
      ${s.preemptions && s.preemptions.length ? `<h3>Preemptions</h3><table data-testid="preemptions"><thead><tr><th>at</th><th>what</th><th>node</th><th>job evicted (whole)</th><th class="num">GPU-hours lost</th></tr></thead><tbody>
        ${s.preemptions.map((p) => `<tr><td>${ts(p.at)}</td><td>${p.role === 'victim' ? `${esc(p.pod)} evicted for ${esc(p.preemptor)} (priority ${p.preemptor_priority})` : `evicted ${esc(p.pod)} to start this`}</td><td>${esc(p.node)}</td><td>${esc(p.job)}</td><td class="num">${p.gpu_hours_lost.toFixed(2)}</td></tr>`).join('')}
      </tbody></table>` : ''}
      <h3>Scheduling attempts (${s.attempts.length})</h3>
      <table data-testid="attempts"><thead><tr><th>at</th><th>pod</th><th>result</th><th>reason</th><th>message</th></tr></thead><tbody>
        ${s.attempts.slice(-50).map((a) => `<tr><td>${ts(a.at)}</td><td>${esc(a.pod)}</td><td>${esc(a.result)}</td><td>${esc(a.category)}</td><td class="msg">${esc(a.message)}</td></tr>`).join('')}
      </tbody></table>
    </section>`
  if (s.activity.length) {
    charts.push(lines(el.querySelector('#c-activity'), s.activity.map((a) => ts(a.t).slice(5, 16)),
      [{ label: 'GPU activity', data: s.activity.map((a) => 100 * a.active), color: STATE_COLORS.busy }],
      { yTitle: 'engine activity (%)', xTitle: 'while running (UTC)', yMax: 100 }))
  } else {
    el.querySelector('#c-activity').replaceWith(Object.assign(document.createElement('p'), { textContent: 'no GPU activity recorded (not running yet)' }))
  }
}

// ------------------------------------------------------------------ ETA page

// inWait writes a wait as "now" or "in 12m".
function inWait(sec) {
  if (sec === undefined || sec === null) return '—'
  sec = Math.round(sec)
  if (sec < 30) return 'now'
  const d = Math.floor(sec / 86400), h = Math.floor((sec % 86400) / 3600), m = Math.round((sec % 3600) / 60)
  if (d) return `in ${d}d${h ? h + 'h' : ''}`
  if (h) return `in ${h}h${String(m).padStart(2, '0')}m`
  return `in ${Math.max(m, 1)}m`
}

const ETA_STATES = {
  starts: 'starts',
  'never-fits': 'never fits',
  'not-started': 'not started in the replays',
}

// etaRows renders estimates as table rows: the expected start (p50) with its
// p10..p90 interval, the nodes it would take and the jobs whose ends free them.
function etaRows(jobs) {
  return jobs.map((j) => {
    const interval = j.wait_p10_seconds !== undefined
      ? `${inWait(j.wait_p10_seconds)} – ${j.wait_p90_seconds !== undefined ? inWait(j.wait_p90_seconds).replace(/^in /, '') : 'never'}`
      : ''
    const start = j.state === 'starts'
      ? `<b data-testid="eta-p50" data-seconds="${j.wait_p50_seconds}" title="${esc(ts(j.p50))}">${inWait(j.wait_p50_seconds)}</b>`
      : `<b data-testid="eta-p50">${esc(ETA_STATES[j.state] || j.state)}</b>`
    const who = j.uid === 'what-if' ? `${esc(j.namespace)}/${esc(j.name)} <small>(not submitted)</small>`
      : `<a href="#/why?kind=job&q=${encodeURIComponent(j.uid)}">${esc(j.namespace)}/${esc(j.name)}</a>`
    return `<tr data-uid="${esc(j.uid)}" data-state="${esc(j.state)}"><td>${who}</td><td>${esc(j.queue)}</td>
      <td class="num">${fmtNum(j.gpus)}${j.members > 1 ? ` <small>(${j.members} members)</small>` : ''}</td>
      <td>${start}</td><td data-testid="eta-interval">${interval}</td>
      <td>${(j.nodes || []).map(esc).join(' ')}</td><td data-testid="eta-waits">${(j.waits_for || []).map(esc).join(', ')}</td>
      <td data-testid="eta-reason">${j.state === 'starts' ? '' : `<span class="badge">${esc(j.state)}</span> `}${esc(j.reason)}</td></tr>`
  }).join('')
}

const ETA_HEAD = `<thead><tr><th>job</th><th>queue</th><th class="num">GPUs</th><th>expected start (p50)</th><th>p10 – p90</th>
  <th>nodes</th><th>waits for</th><th>state / reason</th></tr></thead>`

function etaSummary(a) {
  const acc = a.accuracy_7d || {}
  return `estimated ${ts(a.at)} under profile <b>${esc(a.profile || 'default')}</b> from ${a.runs} replays; ${a.running} job${a.running === 1 ? '' : 's'} running` +
    (acc.estimates ? ` · last 7 days: ${acc.estimates} estimates, median error ${acc.median_abs_error_pct.toFixed(0)}%, ` +
      `${pct(acc.interval_coverage)} of starts inside p10–p90` : ' · no stored estimate scored yet')
}

async function etaPage() {
  main.innerHTML = `
    <h1>When will it start?</h1>
    <section class="card"><h2>Pending jobs <small>replays of the cluster forward under the applied profile, with the run-time predictor's error</small></h2>
      <p class="note" data-testid="eta-summary"></p>
      <table data-testid="eta">${ETA_HEAD}<tbody></tbody></table></section>
    <section class="card"><h2>What if <small>estimated without submitting anything; nothing is written</small></h2>
      <form id="whatif" class="whatif">
        <textarea name="manifest" rows="10" spellcheck="false" data-testid="whatif-manifest"
          placeholder="a Pod or Job manifest, YAML or JSON (leave empty to ask only about drains and limits)"></textarea>
        <div class="fields">
          <label>drain <input name="drain" size="24" placeholder="node-a,node-b"></label>
          <label>queue limits <input name="queue_limit" size="24" placeholder="team-a:16 team-b:8:2"></label>
          <label>members <input name="members" size="4" inputmode="numeric" placeholder="gang"></label>
          <button type="submit">estimate</button>
        </div>
      </form>
      <div id="whatif-answer" data-testid="whatif-answer"></div></section>`
  const form = main.querySelector('#whatif')
  const out = main.querySelector('#whatif-answer')
  form.addEventListener('submit', async (e) => {
    e.preventDefault()
    const f = Object.fromEntries(new FormData(form))
    out.dataset.ready = 'false'
    out.innerHTML = '<p class="note">estimating…</p>'
    try {
      const a = await post('/whatif', {
        drain: f.drain.replace(/\s+/g, ''),
        queue_limit: f.queue_limit.split(/[\s,]+/).filter(Boolean),
        members: f.members.trim(),
      }, f.manifest)
      out.innerHTML = `<p class="note">${etaSummary(a)}</p>` + (a.jobs.length
        ? `<table data-testid="whatif-jobs">${ETA_HEAD}<tbody>${etaRows(a.jobs)}</tbody></table>`
        : '<p>no job would be pending</p>')
    } catch (err) {
      out.innerHTML = `<p class="error" data-testid="whatif-error">${err.status ? err.status + ': ' : ''}${esc(err.message)}</p>`
    }
    out.dataset.ready = 'true'
  })
  const a = await get('/eta')
  // The header's namespace and queue filters narrow the list; the estimate
  // itself is always of the whole cluster, since every job competes.
  const f = filters()
  const jobs = a.jobs.filter((j) => (!f.namespace || j.namespace === f.namespace) && (!f.queue || j.queue === f.queue))
  main.querySelector('[data-testid=eta-summary]').innerHTML = etaSummary(a) +
    (jobs.length < a.jobs.length ? ` · ${jobs.length} of ${a.jobs.length} pending jobs match the filters` : '')
  main.querySelector('[data-testid=eta] tbody').innerHTML = etaRows(jobs) ||
    `<tr><td colspan="8">${a.jobs.length ? 'no pending job matches the filters' : 'no job is pending'}</td></tr>`
}

// ------------------------------------------------------------ profiles page

async function profilesPage(params) {
  main.innerHTML = `
    <h1>Tuned profiles</h1>
    <section class="card"><h2>Predicted vs measured <select id="metric"></select></h2><div class="chart"><canvas id="c-outcome"></canvas></div></section>
    <section class="card"><h2>History</h2>
      <table data-testid="profiles"><thead><tr><th>id</th><th>name</th><th>status</th><th>created</th><th>applied</th><th>outcome (predicted → measured)</th><th>run-time prediction (held out)</th><th>queue limits</th></tr></thead><tbody></tbody></table>
      <button id="more-profiles" hidden>older</button></section>
    <section class="card"><h2>Compare <select id="diff-a"></select> → <select id="diff-b"></select></h2>
      <div class="split"><ul data-testid="diff" class="diff"></ul><table data-testid="weights"><thead><tr><th>weight</th><th class="num">A</th><th class="num">B</th></tr></thead><tbody></tbody></table></div></section>`
  const all = []
  let cursor = ''
  const tbody = main.querySelector('[data-testid=profiles] tbody')
  const more = main.querySelector('#more-profiles')
  async function page() {
    const r = await get('/profiles', { limit: 50, cursor })
    all.push(...r.profiles)
    for (const p of r.profiles) {
      const keys = [...new Set([...Object.keys(p.predicted), ...Object.keys(p.measured)])].sort()
      const outcome = keys.map((k) => `${esc(k)}: <span data-testid="pred-${p.id}-${esc(k)}">${fmtNum(p.predicted[k])}</span> → <span data-testid="meas-${p.id}-${esc(k)}">${fmtNum(p.measured[k])}</span>`).join('<br>')
      const pr = p.prediction
      const prediction = pr ? `<span data-testid="prediction-${p.id}" title="each held-out job's run time predicted from the jobs finished before it">Spearman ${pr.spearman.toFixed(2)}, ${Math.round(100 * pr.within_2x)}% within 2× of actual<br><small>${pr.jobs} jobs</small></span>` : '—'
      const limits = Object.entries(p.queue_limits).map(([q, l]) => `${esc(q)}: ${l.maxGPUs} GPUs`).join('<br>')
      tbody.insertAdjacentHTML('beforeend', `<tr data-id="${p.id}"><td>${p.id}</td><td>${esc(p.name)}${p.seed ? `<br><small data-testid="seed-${p.id}">seed ${esc(p.seed)}; check: <code>${esc(p.verify)}</code></small>` : ''}</td>
        <td><span class="badge ${esc(p.status)}" data-testid="status-${p.id}">${esc(p.status.replace('_', ' '))}</span>${p.reason ? `<br><small>${esc(p.reason)}</small>` : ''}</td>
        <td>${ts(p.created)}</td><td>${ts(p.applied)}</td><td>${outcome || '—'}</td><td>${prediction}</td><td>${limits || '—'}</td></tr>`)
    }
    cursor = r.next_cursor
    more.hidden = !cursor
  }
  more.addEventListener('click', async () => { await page(); drawOutcome() })
  await page()
  if (!all.length) {
    tbody.innerHTML = '<tr><td colspan="8">no tuned profile yet</td></tr>'
    return
  }
  const metricSel = main.querySelector('#metric')
  const metrics = [...new Set(all.flatMap((p) => [...Object.keys(p.predicted), ...Object.keys(p.measured)]))].sort()
  metricSel.innerHTML = metrics.map((m) => `<option>${esc(m)}</option>`).join('')
  let outcomeChart
  function drawOutcome() {
    if (outcomeChart) outcomeChart.destroy()
    const m = metricSel.value
    const ps = [...all].reverse()
    outcomeChart = groupedBars(main.querySelector('#c-outcome'), ps.map((p) => `#${p.id} ${p.name}`), [
      { label: 'predicted', data: ps.map((p) => p.predicted[m] ?? null), color: '#90caf9' },
      { label: 'measured', data: ps.map((p) => p.measured[m] ?? null), color: '#1565c0' },
    ], { yTitle: m })
    charts.push(outcomeChart)
  }
  metricSel.addEventListener('change', drawOutcome)
  drawOutcome()

  const selA = main.querySelector('#diff-a'), selB = main.querySelector('#diff-b')
  const opts = all.map((p) => `<option value="${p.id}">#${p.id} ${esc(p.name)} (${esc(p.status)})</option>`).join('')
  selA.innerHTML = opts
  selB.innerHTML = opts
  selB.value = String(all[0].id)
  selA.value = String((all[1] || all[0]).id)
  if (params.get('a')) selA.value = params.get('a')
  if (params.get('b')) selB.value = params.get('b')
  async function drawDiff() {
    const d = await get('/profiles/diff', { a: selA.value, b: selB.value })
    main.querySelector('[data-testid=diff]').innerHTML = d.changes.length ? d.changes.map((c) => `<li>${esc(c)}</li>`).join('') : '<li>no difference</li>'
    main.querySelector('[data-testid=weights] tbody').innerHTML = d.weights.map((w) =>
      `<tr class="${w.a !== w.b ? 'changed' : ''}"><td>${esc(w.term)}</td><td class="num">${fmtNum(w.a)}</td><td class="num">${fmtNum(w.b)}</td></tr>`).join('')
  }
  selA.addEventListener('change', drawDiff)
  selB.addEventListener('change', drawDiff)
  await drawDiff()
}

function fmtNum(v) {
  if (v === undefined || v === null) return '—'
  return Math.abs(v) >= 100 ? v.toFixed(0) : Number(v.toPrecision(4)).toString()
}

filtersForm.addEventListener('submit', (e) => {
  e.preventDefault()
  route()
})
window.addEventListener('hashchange', route)
route()
