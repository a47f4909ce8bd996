// Thin client of the collector's /api/v1. With a token configured, the API
// answers 401; the page then asks for the token once and keeps it for the tab.

const TOKEN_KEY = 'schedloop.token'

export class APIError extends Error {
  constructor(status, message) {
    super(message)
    this.status = status
  }
}

export function get(path, params = {}) {
  return request('GET', path, params)
}

// post sends body as text (a manifest, YAML or JSON); an array value in
// params repeats its key.
export function post(path, params = {}, body = '') {
  return request('POST', path, params, body)
}

async function request(method, path, params, body) {
  const qs = new URLSearchParams()
  for (const [k, v] of Object.entries(params)) {
    for (const x of Array.isArray(v) ? v : [v]) {
      if (x === undefined || x === null || x === '') continue
      qs.append(k, x)
    }
  }
  const url = '/api/v1' + path + (qs.toString() ? '?' + qs : '')
  for (let attempt = 0; attempt < 2; attempt++) {
    const headers = {}
    const token = sessionStorage.getItem(TOKEN_KEY)
    if (token) headers.Authorization = 'Bearer ' + token
    const init = { method, headers }
    if (method !== 'GET') {
      headers['Content-Type'] = 'application/yaml'
      init.body = body
    }
    const resp = await fetch(url, init)
    if (resp.status === 401 && attempt === 0) {
      const t = window.prompt('This schedloop API needs a token (collector -api-token):')
      if (!t) throw new APIError(401, 'authentication required')
      sessionStorage.setItem(TOKEN_KEY, t)
      continue
    }
    const answer = await resp.json().catch(() => ({ error: resp.statusText }))
    if (!resp.ok) throw new APIError(resp.status, answer.error || resp.statusText)
    return answer
  }
  throw new APIError(401, 'authentication required')
}
