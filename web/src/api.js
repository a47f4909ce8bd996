// Thin client of the collector's /api/v1. With a token configured, the API
// answers 401; the page then asks for the token once and keeps it for the tab.

const TOKEN_KEY = 'schedloop.token'

export class APIError extends Error {
  constructor(status, message) {
    super(message)
    this.status = status
  }
}

export async function get(path, params = {}) {
  const qs = new URLSearchParams()
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === '') continue
    qs.set(k, v)
  }
  const url = '/api/v1' + path + (qs.toString() ? '?' + qs : '')
  for (let attempt = 0; attempt < 2; attempt++) {
    const headers = {}
    const token = sessionStorage.getItem(TOKEN_KEY)
    if (token) headers.Authorization = 'Bearer ' + token
    const resp = await fetch(url, { headers })
    if (resp.status === 401 && attempt === 0) {
      const t = window.prompt('This schedloop API needs a token (collector -api-token):')
      if (!t) throw new APIError(401, 'authentication required')
      sessionStorage.setItem(TOKEN_KEY, t)
      continue
    }
    const body = await resp.json().catch(() => ({ error: resp.statusText }))
    if (!resp.ok) throw new APIError(resp.status, body.error || resp.statusText)
    return body
  }
  throw new APIError(401, 'authentication required')
}
