// Chart.js, registered with only what the pages draw, plus one plugin that
// writes each series' name next to its last point so nobody has to hunt for
// a legend.
import {
  Chart, LineController, BarController, LineElement, BarElement, PointElement,
  LinearScale, CategoryScale, Filler, Tooltip,
} from 'chart.js'

Chart.register(LineController, BarController, LineElement, BarElement, PointElement,
  LinearScale, CategoryScale, Filler, Tooltip)
Chart.defaults.font.family = 'system-ui, sans-serif'
Chart.defaults.font.size = 12
Chart.defaults.animation = false
Chart.defaults.maintainAspectRatio = false

export const STATE_COLORS = {
  busy: '#2e7d32',
  allocated_idle: '#ef6c00',
  unallocated_waiting: '#c62828',
  spare: '#9e9e9e',
}
export const STATE_TITLES = {
  busy: 'busy',
  allocated_idle: 'allocated but idle',
  unallocated_waiting: 'unallocated while demand waits',
  spare: 'spare',
}
export const REASON_COLORS = {
  not_attempted: '#90a4ae',
  insufficient_gpu: '#c62828',
  insufficient_other: '#ad1457',
  gang_incomplete: '#6a1b9a',
  queue_limit: '#1565c0',
  quota: '#283593',
  topology: '#00838f',
  taint_affinity: '#558b2f',
  preemption: '#ef6c00',
  reserved: '#f9a825',
  other: '#5d4037',
}

// directLabels draws dataset labels at the right end of each series (the
// middle of its band when stacked) in the chart's right padding.
const directLabels = {
  id: 'directLabels',
  afterDatasetsDraw(chart, _args, opts) {
    if (!opts || !opts.enabled) return
    const { ctx, chartArea } = chart
    ctx.save()
    ctx.font = '12px system-ui, sans-serif'
    ctx.textBaseline = 'middle'
    let lastY = -Infinity
    const items = []
    chart.data.datasets.forEach((ds, i) => {
      const meta = chart.getDatasetMeta(i)
      if (meta.hidden || !meta.data.length) return
      const el = meta.data[meta.data.length - 1]
      let y = el.y
      if (opts.stacked) {
        const base = el.base !== undefined ? el.base : chartArea.bottom
        y = (el.y + base) / 2
      }
      items.push({ y, text: ds.label, color: ds.borderColor })
    })
    items.sort((a, b) => a.y - b.y)
    for (const it of items) {
      const y = Math.max(it.y, lastY + 14)
      ctx.fillStyle = it.color
      ctx.fillText(it.text, chartArea.right + 6, y)
      lastY = y
    }
    ctx.restore()
  },
}
Chart.register(directLabels)

export function fmtTime(iso, step) {
  const d = new Date(iso)
  const p = (n) => String(n).padStart(2, '0')
  const day = `${p(d.getUTCMonth() + 1)}-${p(d.getUTCDate())}`
  return step === '1d' ? day : `${day} ${p(d.getUTCHours())}:00`
}

// stackedArea draws series (keys of points) as stacked areas over time.
export function stackedArea(canvas, points, keys, { colors, titles, step, yTitle }) {
  return new Chart(canvas, {
    type: 'line',
    data: {
      labels: points.map((p) => fmtTime(p.t, step)),
      datasets: keys.map((k) => ({
        label: titles[k] || k,
        data: points.map((p) => (typeof p.get === 'function' ? p.get(k) : p[k]) || 0),
        borderColor: colors[k] || '#555',
        backgroundColor: (colors[k] || '#555') + 'cc',
        fill: true,
        // A lone bucket has no area to fill: show it as points.
        pointRadius: points.length === 1 ? 4 : 0,
        borderWidth: 1,
        tension: 0,
      })),
    },
    options: {
      layout: { padding: { right: 190 } },
      interaction: { mode: 'index', intersect: false },
      scales: {
        x: { ticks: { maxTicksLimit: 12, autoSkip: true }, title: { display: true, text: 'time (UTC)' } },
        y: { stacked: true, beginAtZero: true, title: { display: true, text: yTitle } },
      },
      plugins: { directLabels: { enabled: true, stacked: true }, tooltip: { enabled: true } },
    },
  })
}

// stackedBars draws one horizontal bar per row, split by keys.
export function stackedBars(canvas, rows, keys, { colors, titles, xTitle, labelOf }) {
  return new Chart(canvas, {
    type: 'bar',
    data: {
      labels: rows.map(labelOf),
      datasets: keys.map((k) => ({
        label: titles[k] || k,
        data: rows.map((r) => r[k] || 0),
        backgroundColor: colors[k] || '#555',
        borderColor: colors[k] || '#555',
      })),
    },
    options: {
      indexAxis: 'y',
      scales: {
        x: { stacked: true, beginAtZero: true, title: { display: true, text: xTitle } },
        y: { stacked: true, ticks: { autoSkip: false } },
      },
      plugins: { tooltip: { enabled: true } },
    },
  })
}

// stackedColumns draws time buckets as stacked vertical bars.
export function stackedColumns(canvas, points, keys, { colors, titles, step, yTitle }) {
  return new Chart(canvas, {
    type: 'bar',
    data: {
      labels: points.map((p) => fmtTime(p.t, step)),
      datasets: keys.map((k) => ({
        label: titles[k] || k,
        data: points.map((p) => p.values[k] || 0),
        backgroundColor: colors[k] || '#555',
        borderColor: colors[k] || '#555',
      })),
    },
    options: {
      layout: { padding: { right: 150 } },
      scales: {
        x: { stacked: true, ticks: { maxTicksLimit: 12 }, title: { display: true, text: 'time (UTC)' } },
        y: { stacked: true, beginAtZero: true, title: { display: true, text: yTitle } },
      },
      plugins: { directLabels: { enabled: true, stacked: true }, tooltip: { enabled: true } },
    },
  })
}

// lines draws one or more line series over category labels.
export function lines(canvas, labels, series, { yTitle, xTitle, yMax }) {
  return new Chart(canvas, {
    type: 'line',
    data: {
      labels,
      datasets: series.map((s) => ({
        label: s.label, data: s.data, borderColor: s.color, backgroundColor: s.color,
        borderDash: s.dash || [], pointRadius: 2, borderWidth: 2, tension: 0,
      })),
    },
    options: {
      layout: { padding: { right: 120 } },
      interaction: { mode: 'index', intersect: false },
      scales: {
        x: { ticks: { maxTicksLimit: 10 }, title: { display: !!xTitle, text: xTitle } },
        y: { beginAtZero: true, max: yMax, title: { display: true, text: yTitle } },
      },
      plugins: { directLabels: { enabled: true }, tooltip: { enabled: true } },
    },
  })
}

// groupedBars draws side-by-side bars (e.g. predicted vs measured).
export function groupedBars(canvas, labels, series, { yTitle }) {
  return new Chart(canvas, {
    type: 'bar',
    data: {
      labels,
      datasets: series.map((s) => ({ label: s.label, data: s.data, backgroundColor: s.color, borderColor: s.color })),
    },
    options: {
      layout: { padding: { right: 90 } },
      scales: { y: { beginAtZero: true, title: { display: true, text: yTitle } } },
      plugins: { directLabels: { enabled: true }, tooltip: { enabled: true } },
    },
  })
}
