// The znippy web console: a client of the service's public HTTP API
// (docs/http.md), and nothing more. No framework and no build step: the
// service embeds this file as it is.
//
// Every view is drawn from one or a few API calls and asks only for what it
// shows: a directory is one page of a folded listing (`delimiter=/`), a
// preview the first 64 KiB of a file, so an archive of any size costs the
// browser a page at a time. The token, when the service needs one, is kept
// in this tab's session storage and sent as a bearer header; it never goes
// into a URL or a cookie.
'use strict';

const TOKEN_KEY = 'znippy-token';
const PAGE = 200;
const PREVIEW_BYTES = 64 * 1024;
const IMAGE_PREVIEW_MAX = 8 * 1024 * 1024;
const IMAGE_TYPES = { png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp', svg: 'image/svg+xml', avif: 'image/avif', bmp: 'image/bmp', ico: 'image/x-icon' };

// ---------------------------------------------------------------- helpers

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined && kid !== false) el.append(kid);
  return el;
}

const enc = encodeURIComponent;
// A path in a URL: each component encoded, the slashes kept.
const encPath = (p) => p.split('/').map(enc).join('/');

function bytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return i === 0 ? `${n} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}

const count = (n) => (n === null || n === undefined ? '—' : n.toLocaleString('en-US'));
const mode = (m) => (m === null || m === undefined ? '—' : m.toString(8).padStart(4, '0'));
const when = (ms) => new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');

function say(text, kind) {
  const s = document.getElementById('status');
  s.textContent = text;
  s.className = kind || 'info';
}

// ---------------------------------------------------------------- the API

class ApiError extends Error {
  constructor(status, code, message) {
    super(`${code}: ${message}`);
    this.status = status;
    this.code = code;
  }
}

const token = () => sessionStorage.getItem(TOKEN_KEY);
const auth = () => (token() ? { Authorization: `Bearer ${token()}` } : {});

// The service's JSON error as it sent it; anything else by its status.
function errorOf(status, statusText, text) {
  try {
    const e = JSON.parse(text).error;
    if (e && e.code) return new ApiError(status, e.code, e.message);
  } catch (_) { /* not JSON: say the status */ }
  return new ApiError(status, `http_${status}`, statusText || 'request failed');
}

async function api(method, path, options) {
  const o = options || {};
  const r = await fetch(path, { method, body: o.body, headers: { ...auth(), ...(o.headers || {}) } });
  if (!r.ok) throw errorOf(r.status, r.statusText, await r.text());
  if (o.raw) return r;
  return r.status === 204 ? null : r.json();
}

function report(e) {
  say(e instanceof ApiError ? e.message : `error: ${e.message || e}`, 'error');
  if (e instanceof ApiError && (e.status === 401 || e.status === 403)) {
    askToken(e.status === 403 ? 'The service refused this token.' : 'This request needs a token.');
  }
}

// Whether reads need the token (--private-reads): then a download cannot
// be a plain link, which sends no header.
let readsPrivate = false;
async function probeReads() {
  const r = await fetch('/archives', { method: 'HEAD' });
  readsPrivate = r.status === 401;
}

function askToken(why) {
  const form = document.getElementById('token-form');
  document.getElementById('token-why').textContent = why;
  form.hidden = false;
  document.getElementById('token-input').focus();
}

function setupToken() {
  const form = document.getElementById('token-form');
  const input = document.getElementById('token-input');
  const button = document.getElementById('token-button');
  const label = () => { button.textContent = token() ? 'Token ✓' : 'Token'; };
  label();
  button.addEventListener('click', () => {
    if (form.hidden) askToken(token() ? 'A token is set for this tab.' : 'Give the service’s token.');
    else form.hidden = true;
  });
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value);
    input.value = '';
    form.hidden = true;
    label();
    say('Token set for this tab.');
    // A view that could not be read without the token is drawn again; one
    // that was (a form being filled in) is left as it is.
    if (viewFailed) route();
  });
  document.getElementById('token-forget').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    form.hidden = true;
    label();
    say('Token forgotten.');
  });
}

// A link that downloads `url`: a plain link where reads are public (the
// browser streams it and may resume with Range); with private reads, a
// fetch with the token, saved from memory.
function downloadLink(url, name, label) {
  const a = h('a', { href: url, download: name }, label);
  a.addEventListener('click', async (ev) => {
    if (!readsPrivate) return;
    ev.preventDefault();
    try {
      const blob = await (await api('GET', url, { raw: true })).blob();
      const local = URL.createObjectURL(blob);
      const save = h('a', { href: local, download: name });
      document.body.append(save);
      save.click();
      save.remove();
      setTimeout(() => URL.revokeObjectURL(local), 60_000);
    } catch (e) { report(e); }
  });
  return a;
}

// ---------------------------------------------------------------- routing

// #/                        the archives
// #/a/ID                    an archive's root directory
// #/a/ID/files/DIR          a directory (DIR encoded as one component)
// #/a/ID/meta | history | query
function parseHash() {
  let parts;
  try {
    parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
  } catch (_) {
    return { view: 'archives' }; // a hand-typed hash that is not percent-encoding
  }
  if (parts[0] !== 'a' || !parts[1]) return { view: 'archives' };
  const tab = parts[2] || 'files';
  return { view: 'archive', id: parts[1], tab, dir: tab === 'files' ? (parts[3] || '') : '' };
}

const archiveHref = (id, tab, dir) => `#/a/${enc(id)}/${tab || 'files'}${dir ? `/${enc(dir)}` : ''}`;

let drawn = 0;
let viewFailed = false;
// The archive view's numbers, drawn again after a change made on the page.
let refreshStats = async () => {};
async function route() {
  const main = document.getElementById('main');
  const at = parseHash();
  const mine = ++drawn;
  const crumbs = document.getElementById('crumbs');
  crumbs.replaceChildren(h('a', { href: '#/' }, 'Archives'));
  const body = h('div');
  viewFailed = false;
  try {
    if (at.view === 'archives') await archivesView(body);
    else {
      crumbs.append(' / ', h('a', { href: archiveHref(at.id) }, at.id));
      await archiveView(body, at);
    }
  } catch (e) {
    viewFailed = true;
    report(e);
    body.append(h('p', { class: 'empty' }, e.message));
  }
  // A later navigation drew its own view already.
  if (mine === drawn) main.replaceChildren(body);
}

// ---------------------------------------------------------------- archives

async function archivesView(root) {
  const { archives } = await api('GET', '/archives');
  document.title = 'znippy: archives';
  root.append(h('h1', {}, 'Archives'));
  if (archives.length === 0) root.append(h('p', { class: 'empty' }, 'No archives yet.'));
  else {
    const rows = archives.map((a) => h('tr', {},
      h('th', { scope: 'row' }, h('a', { href: archiveHref(a.id) }, a.id)),
      h('td', {}, h('span', { class: `state ${a.state}` }, a.state)),
      h('td', { class: 'num' }, count(a.files)),
      h('td', { class: 'num' }, bytes(a.bytes_in)),
      h('td', { class: 'num wide' }, bytes(a.bytes_stored)),
      h('td', { class: 'num wide' }, a.bytes_in ? `${((100 * a.bytes_stored) / a.bytes_in).toFixed(1)}%` : '—'),
      h('td', { class: 'num wide' }, count(a.appends)),
      h('td', {}, h('button', {
        type: 'button', class: 'danger', 'aria-label': `Drop archive ${a.id}`,
        onclick: async () => {
          if (!confirm(`Drop archive ${a.id}? Its tables, blobs and sealed file are deleted.`)) return;
          try { await api('DELETE', `/archives/${enc(a.id)}`); say(`Dropped ${a.id}.`); route(); } catch (e) { report(e); }
        },
      }, 'Drop'))));
    root.append(h('div', { class: 'scroll' }, h('table', {},
      h('caption', { class: 'sr' }, 'Archives'),
      h('thead', {}, h('tr', {}, [['Archive'], ['State'], ['Files', 'num'], ['Bytes in', 'num'], ['Stored', 'num wide'],
        ['Ratio', 'num wide'], ['Appends', 'num wide'], ['']].map(([t, cls]) => h('th', { scope: 'col', class: cls }, t)))),
      h('tbody', {}, rows))));
  }
  const id = h('input', { id: 'new-id', name: 'id', required: true, pattern: '[A-Za-z0-9_\\-]{1,64}', maxlength: 64, autocomplete: 'off' });
  const meta = h('input', { id: 'new-meta', type: 'checkbox' });
  root.append(h('form', {
    class: 'panel row', 'aria-labelledby': 'new-title',
    onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        await api('POST', '/archives', { body: JSON.stringify({ id: id.value, metadata: meta.checked }), headers: { 'Content-Type': 'application/json' } });
        say(`Created ${id.value}.`);
        location.hash = archiveHref(id.value);
      } catch (e) { report(e); }
    },
  },
  h('h2', { id: 'new-title' }, 'New archive'),
  h('label', { for: 'new-id' }, 'Id (letters, digits, _ and -)'), id,
  h('label', { class: 'check' }, meta, ' with a metadata section'),
  h('button', { type: 'submit' }, 'Create')));
}

// ---------------------------------------------------------------- one archive

async function archiveView(root, at) {
  const a = await api('GET', `/archives/${enc(at.id)}`);
  document.title = `znippy: ${a.id}`;
  const live = a.state === 'live';
  const actions = h('div', { class: 'actions' });
  if (live) {
    actions.append(h('button', { type: 'button', onclick: () => seal(a.id) }, 'Seal…'));
  } else {
    actions.append(downloadLink(`/archives/${enc(a.id)}/archive.znippy`, `${a.id}.znippy`, `Download ${a.id}.znippy`));
  }
  let stats = statsOf(a);
  // After a change made on this page, the numbers again, the rest kept.
  refreshStats = async () => {
    const fresh = statsOf(await api('GET', `/archives/${enc(a.id)}`));
    stats.replaceWith(fresh);
    stats = fresh;
  };
  root.append(
    h('h1', {}, a.id, ' ', h('span', { class: `state ${a.state}` }, a.state)),
    stats,
    actions,
    h('div', { id: 'seal-report' }));
  const tabs = [['files', 'Files'], ['meta', 'Metadata'], ['history', 'History'], ['query', 'Query']];
  root.append(h('nav', { class: 'tabs', 'aria-label': 'Archive views' }, tabs.map(([t, label]) =>
    h('a', { href: archiveHref(a.id, t), 'aria-current': t === at.tab ? 'page' : null }, label))));
  const panel = h('section', { 'aria-label': tabs.find(([t]) => t === at.tab)?.[1] || 'Files' });
  root.append(panel);
  if (at.tab === 'meta') metaTab(panel, a);
  else if (at.tab === 'history') await historyTab(panel, a);
  else if (at.tab === 'query') queryTab(panel, a);
  else await filesTab(panel, a, at.dir);
}

function statsOf(a) {
  const facts = h('dl', { class: 'facts' },
    h('dt', {}, 'Files'), h('dd', {}, count(a.files)),
    h('dt', {}, 'Bytes in'), h('dd', {}, bytes(a.bytes_in)),
    h('dt', {}, 'Stored'), h('dd', {}, bytes(a.bytes_stored)),
    h('dt', {}, 'Appends'), h('dd', {}, count(a.appends)),
    h('dt', {}, 'Metadata'), h('dd', {}, a.metadata ? 'yes' : 'none yet'));
  if (a.state === 'sealed') facts.append(h('dt', {}, 'Signed'), h('dd', { id: 'archive-signer' }, signedBy(a.id, a.signer)));
  return facts;
}

// Who signed a sealed archive, with its signature to download, or why not.
function signedBy(id, signer) {
  return signer
    ? [`by ${signer} `, downloadLink(`/archives/${enc(id)}/archive.znippy.sig`, `${id}.znippy.sig`, 'signature (DER CMS)')]
    : 'no: the service signs seals when started with --sign-key';
}

async function seal(id) {
  if (!confirm(`Seal ${id}? It becomes an immutable .znippy; appends and deletes are refused afterwards.`)) return;
  say(`Sealing ${id}…`);
  try {
    const r = await api('POST', `/archives/${enc(id)}/seal`);
    say(`Sealed ${id}.`);
    await route();
    // The whole file's SHA-256 is one read of it, which the seal does not
    // make: asked for on its own, it fills in when it comes.
    const sha = h('code', { id: 'seal-sha256', 'aria-busy': 'true' }, 'reading the sealed file…');
    api('GET', r.sha256, { raw: true })
      .then(async (res) => { sha.textContent = (await res.text()).split(' ')[0]; sha.removeAttribute('aria-busy'); })
      .catch((e) => { sha.textContent = e.message; });
    const out = document.getElementById('seal-report');
    if (out) {
      out.replaceChildren(h('section', { class: 'panel', 'aria-label': 'Seal report' },
        h('h2', {}, 'Seal report'),
        h('dl', { class: 'facts' },
          h('dt', {}, 'Size'), h('dd', {}, `${bytes(r.size)} (${count(r.size)} bytes)`),
          h('dt', {}, 'SHA-256'), h('dd', {}, sha),
          h('dt', {}, 'Identity'), h('dd', {}, h('code', {}, r.identity)),
          h('dt', {}, 'Signed'), h('dd', { id: 'seal-signer' }, signedBy(id, r.signer)),
          h('dt', {}, 'Written'), h('dd', {}, r.in_place ? `in place: a tail of ${bytes(r.tail_bytes)}` : `re-packed: ${count(r.blobs_copied)} blobs copied, ${count(r.blobs_rebuilt)} rebuilt`)),
        downloadLink(r.download, `${id}.znippy`, `Download ${id}.znippy`)));
    }
  } catch (e) { report(e); }
}

// ---------------------------------------------------------------- files

async function filesTab(panel, a, dir) {
  const live = a.state === 'live';
  const parts = dir ? dir.replace(/\/$/, '').split('/') : [];
  const trail = h('nav', { class: 'trail', 'aria-label': 'Directory' }, h('a', { href: archiveHref(a.id) }, '/'));
  parts.forEach((p, i) => {
    const d = `${parts.slice(0, i + 1).join('/')}/`;
    trail.append(' ', h('a', { href: archiveHref(a.id, 'files', d), 'aria-current': i === parts.length - 1 ? 'location' : null }, `${p}/`));
  });
  const filter = h('input', { id: 'filter', type: 'search', autocomplete: 'off', placeholder: 'name prefix' });
  const tbody = h('tbody');
  const more = h('button', { type: 'button', hidden: true }, 'Show more');
  const preview = h('section', { class: 'preview', 'aria-live': 'polite', 'aria-label': 'Preview' });
  let next = null;
  let shown = 0;

  const load = async (fresh) => {
    if (fresh) { tbody.replaceChildren(); next = null; shown = 0; }
    const q = new URLSearchParams({ prefix: dir + filter.value, limit: String(PAGE) });
    // The folded listing needs a directory prefix; a filter within a
    // directory lists what starts with it, unfolded.
    if (!filter.value) q.set('delimiter', '/');
    if (next) q.set('after', next);
    const page = await api('GET', `/archives/${enc(a.id)}/files?${q}`);
    const items = [...(page.dirs || []).map((d) => ({ dir: d })), ...page.files].sort((x, y) => {
      const px = x.dir || x.path;
      const py = y.dir || y.path;
      return px < py ? -1 : px > py ? 1 : 0;
    });
    for (const it of items) tbody.append(it.dir ? dirRow(a, it.dir, dir) : fileRow(a, it, dir, live, preview, () => changed()));
    shown += items.length;
    next = page.next;
    more.hidden = !next;
    if (shown === 0) tbody.append(h('tr', {}, h('td', { colspan: 5, class: 'empty' }, filter.value ? 'Nothing here starts with that.' : 'No files here yet.')));
  };
  more.addEventListener('click', () => load(false).catch(report));
  let timer = null;
  filter.addEventListener('input', () => {
    clearTimeout(timer);
    timer = setTimeout(() => load(true).catch(report), 200);
  });

  panel.append(
    h('h2', { class: 'sr' }, 'Files'),
    trail,
    h('div', { class: 'row' }, h('label', { for: 'filter' }, 'Filter this directory'), filter),
    h('div', { class: 'scroll' }, h('table', { class: 'files' },
      h('caption', { class: 'sr' }, `Files in /${dir}`),
      h('thead', {}, h('tr', {},
        h('th', { scope: 'col' }, 'Name'), h('th', { scope: 'col', class: 'num' }, 'Size'),
        h('th', { scope: 'col', class: 'wide' }, 'Mode'), h('th', { scope: 'col', class: 'wide' }, 'Type'),
        h('th', { scope: 'col' }, h('span', { class: 'sr' }, 'Actions')))),
      tbody)),
    more,
    preview);
  // After an upload or a delete: the listing and the numbers again, the
  // upload's progress list kept.
  const changed = () => Promise.all([load(true), refreshStats()]).catch(report);
  if (live) panel.append(uploader(a, dir, changed));
  await load(true);
}

function dirRow(a, d, dir) {
  return h('tr', { class: 'dir' },
    h('th', { scope: 'row' }, h('a', { href: archiveHref(a.id, 'files', d) }, `${d.slice(dir.length)}`)),
    h('td', { class: 'num' }, ''), h('td', { class: 'wide' }, ''), h('td', { class: 'wide' }, 'directory'), h('td', {}, ''));
}

function fileRow(a, f, dir, live, preview, reload) {
  const name = f.path.slice(dir.length);
  const url = `/archives/${enc(a.id)}/files/${encPath(f.path)}`;
  const acts = h('td', { class: 'acts' });
  if (f.type === 'file') acts.append(downloadLink(url, name.split('/').pop(), h('span', {}, 'Download', h('span', { class: 'sr' }, ` ${f.path}`))));
  acts.append(h('button', { type: 'button', class: 'quiet', 'aria-label': `Preview ${f.path}`, onclick: () => showPreview(a, f, preview).catch(report) }, 'Preview'));
  if (live) {
    acts.append(h('button', {
      type: 'button', class: 'danger', 'aria-label': `Delete ${f.path}`,
      onclick: async () => {
        if (!confirm(`Delete ${f.path}?`)) return;
        try { await api('DELETE', url); say(`Deleted ${f.path}.`); await reload(); } catch (e) { report(e); }
      },
    }, 'Delete'));
  }
  return h('tr', {},
    h('th', { scope: 'row' }, name),
    h('td', { class: 'num' }, bytes(f.size)),
    h('td', { class: 'wide' }, mode(f.mode)),
    h('td', { class: 'wide' }, f.type),
    acts);
}

function looksText(buf) {
  const b = new Uint8Array(buf);
  if (b.includes(0)) return false;
  try { new TextDecoder('utf-8', { fatal: true }).decode(b.length === PREVIEW_BYTES ? b.slice(0, b.length - 4) : b); return true; } catch (_) { return false; }
}

async function showPreview(a, f, out) {
  const url = `/archives/${enc(a.id)}/files/${encPath(f.path)}`;
  const box = h('div', { class: 'panel' }, h('h2', {}, f.path));
  out.replaceChildren(box);
  const ext = (f.path.split('.').pop() || '').toLowerCase();
  if (f.type === 'symlink') {
    const r = await api('GET', url, { raw: true });
    box.append(h('p', {}, 'A symbolic link to ', h('code', {}, r.headers.get('x-znippy-link-target') || '?')));
  } else if (f.type === 'dir') {
    box.append(h('p', {}, 'An empty directory.'));
  } else if (IMAGE_TYPES[ext] && f.size <= IMAGE_PREVIEW_MAX) {
    const blob = await (await api('GET', url, { raw: true })).blob();
    const img = h('img', { src: URL.createObjectURL(new Blob([blob], { type: IMAGE_TYPES[ext] })), alt: `Preview of ${f.path}` });
    box.append(img);
  } else if (f.size === 0) {
    box.append(h('p', { class: 'empty' }, 'An empty file.'));
  } else {
    const r = await api('GET', url, { raw: true, headers: { Range: `bytes=0-${PREVIEW_BYTES - 1}` } });
    const buf = await r.arrayBuffer();
    if (looksText(buf)) {
      box.append(h('pre', { class: 'text', tabindex: 0 }, new TextDecoder().decode(buf)));
      if (f.size > buf.byteLength) box.append(h('p', { class: 'hint' }, `The first ${bytes(buf.byteLength)} of ${bytes(f.size)}.`));
    } else {
      box.append(h('p', { class: 'empty' }, 'Binary content: no preview.'));
    }
  }
  box.append(await packageOf(a, f.path), await factsOf(a, f.path));
}

// What the plugins read from the file, if it is a package: a jar's
// coordinates, a wheel's requirements. Nothing for other files.
async function packageOf(a, path) {
  const res = await api('GET', `/archives/${enc(a.id)}/packages?${new URLSearchParams({ path })}`);
  const sec = h('div', { class: 'package-of' });
  for (const p of res.packages) {
    sec.append(h('h3', {}, `Package (${p.type}${p.repo ? `, ${p.repo}` : ''})`));
    if (p.error !== null) sec.append(h('p', { class: 'empty', 'data-result': 'package_error' }, `Unreadable: ${p.error}`));
    const show = (v) => (Array.isArray(v) ? v.join(', ') : typeof v === 'object' ? Object.entries(v).map(([k, x]) => `${k} ${x}`).join(', ') : String(v));
    const rows = Object.entries(p.columns).map(([k, v]) => h('tr', {}, h('th', { scope: 'row' }, k), h('td', { class: 'value' }, show(v))));
    if (rows.length) sec.append(h('div', { class: 'scroll' }, h('table', { class: 'package' }, h('tbody', {}, rows))));
  }
  return sec;
}

// Every fact about one file, and a form that sets one.
async function factsOf(a, path) {
  const sec = h('div', { class: 'facts-of' }, h('h3', {}, 'Metadata'));
  const res = await api('GET', `/archives/${enc(a.id)}/meta?${new URLSearchParams({ path, limit: '1000' })}`);
  if (res.result === 'no_metadata') sec.append(h('p', { class: 'empty', 'data-result': 'no_metadata' }, 'This archive has no metadata.'));
  else if (res.result === 'no_match') sec.append(h('p', { class: 'empty', 'data-result': 'no_match' }, 'No facts about this file.'));
  else sec.append(factTable(res.rows, false));
  if (a.state === 'live') {
    const key = h('input', { id: 'fact-key', required: true, autocomplete: 'off' });
    const value = h('input', { id: 'fact-value', autocomplete: 'off' });
    sec.append(h('form', {
      class: 'row',
      onsubmit: async (ev) => {
        ev.preventDefault();
        try {
          await api('PUT', `/archives/${enc(a.id)}/meta`, {
            body: JSON.stringify({ set: [{ path, key: key.value, value: typed(value.value) }] }),
            headers: { 'Content-Type': 'application/json' },
          });
          say(`Set ${key.value} of ${path}.`);
          sec.replaceWith(await factsOf(a, path));
          await refreshStats();
        } catch (e) { report(e); }
      },
    }, h('label', { for: 'fact-key' }, 'Key'), key, h('label', { for: 'fact-value' }, 'Value'), value, h('button', { type: 'submit' }, 'Set fact')));
  }
  return sec;
}

// A value typed as the CLI and the multipart upload type one.
function typed(text) {
  if (text === 'true') return true;
  if (text === 'false') return false;
  if (/^-?\d+$/.test(text) && Number.isSafeInteger(Number(text))) return Number(text);
  if (/^-?\d+\.\d+$/.test(text)) return Number(text);
  return text;
}

function factTable(rows, withPath) {
  return h('div', { class: 'scroll' }, h('table', {},
    h('thead', {}, h('tr', {}, (withPath ? ['File', 'Key', 'Type', 'Value'] : ['Key', 'Type', 'Value']).map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, rows.map((r) => h('tr', {},
      withPath ? h('td', {}, r.path === null ? h('em', {}, 'the archive') : r.path) : null,
      h('td', {}, r.key), h('td', {}, r.type), h('td', { class: 'value' }, String(r.value)))))));
}

// ---------------------------------------------------------------- upload

function uploader(a, dir, done) {
  const files = h('input', { id: 'up-files', type: 'file', multiple: true });
  const folder = h('input', { id: 'up-folder', type: 'file', webkitdirectory: true });
  const list = h('ul', { class: 'progress', 'aria-live': 'polite' });
  const zone = h('div', { class: 'zone' }, `Drop files and folders here to add them to /${dir}`);
  const send = (picked) => upload(a, dir, picked, list, done);
  files.addEventListener('change', () => send([...files.files].map((f) => ({ file: f, path: f.name }))));
  folder.addEventListener('change', () => send([...folder.files].map((f) => ({ file: f, path: f.webkitRelativePath || f.name }))));
  zone.addEventListener('dragover', (ev) => { ev.preventDefault(); zone.classList.add('over'); });
  zone.addEventListener('dragleave', () => zone.classList.remove('over'));
  zone.addEventListener('drop', async (ev) => {
    ev.preventDefault();
    zone.classList.remove('over');
    // The entries must be taken before the first await: the transfer
    // empties once the event handler returns.
    const dt = ev.dataTransfer;
    const entries = [...dt.items].map((i) => i.webkitGetAsEntry && i.webkitGetAsEntry()).filter(Boolean);
    // A drop the browser gives no entries for (one made by a script) still
    // has its files, without folders.
    const plain = [...dt.files].map((f) => ({ file: f, path: f.name }));
    try { send(entries.length ? await walk(entries) : plain); } catch (e) { report(e); }
  });
  return h('section', { class: 'panel', 'aria-labelledby': 'up-title' },
    h('h2', { id: 'up-title' }, 'Upload'),
    h('div', { class: 'row' },
      h('label', { for: 'up-files' }, 'Files'), files,
      h('label', { for: 'up-folder' }, 'A folder'), folder),
    zone, list);
}

async function walk(entries) {
  const out = [];
  const visit = async (entry, base) => {
    if (entry.isFile) {
      const file = await new Promise((ok, fail) => entry.file(ok, fail));
      out.push({ file, path: base + entry.name });
    } else if (entry.isDirectory) {
      const reader = entry.createReader();
      for (;;) {
        const batch = await new Promise((ok, fail) => reader.readEntries(ok, fail));
        if (batch.length === 0) break;
        for (const e of batch) await visit(e, `${base}${entry.name}/`);
      }
    }
  };
  for (const e of entries) await visit(e, '');
  return out;
}

// One multipart request, so one append: the files land together or not
// at all. Each file's bar follows the bytes sent through its part.
function upload(a, dir, picked, list, done) {
  if (picked.length === 0) return;
  const form = new FormData();
  const bars = [];
  let offset = 0;
  list.replaceChildren();
  for (const { file, path } of picked) {
    const full = dir + path;
    form.append('file', file, full);
    const bar = h('progress', { max: file.size || 1, value: 0, 'aria-label': `Upload of ${full}` });
    const state = h('span', { class: 'hint' }, 'waiting');
    list.append(h('li', {}, h('span', { class: 'name' }, full), bar, state));
    // A part's headers come before its bytes; about 200 bytes of them.
    offset += 200 + full.length;
    bars.push({ bar, state, start: offset, size: file.size });
    offset += file.size;
  }
  const xhr = new XMLHttpRequest();
  xhr.open('POST', `/archives/${enc(a.id)}/files`);
  if (token()) xhr.setRequestHeader('Authorization', `Bearer ${token()}`);
  xhr.upload.addEventListener('progress', (ev) => {
    for (const b of bars) {
      const sent = Math.max(0, Math.min(b.size, ev.loaded - b.start));
      b.bar.value = b.size ? sent : (ev.loaded >= b.start ? 1 : 0);
      b.state.textContent = sent >= b.size ? 'sent' : `${bytes(sent)} of ${bytes(b.size)}`;
    }
  });
  const finish = (text, ok) => {
    for (const b of bars) {
      if (ok) b.bar.value = b.bar.max;
      b.state.textContent = text;
    }
  };
  xhr.addEventListener('load', () => {
    if (xhr.status >= 200 && xhr.status < 300) {
      const r = JSON.parse(xhr.responseText);
      finish('stored', true);
      say(`Stored ${count(r.files)} files, ${bytes(r.bytes)}, as append ${r.append_seq}.`);
      done();
    } else {
      const e = errorOf(xhr.status, xhr.statusText, xhr.responseText);
      finish(`failed: ${e.message}`, false);
      report(e);
    }
  });
  xhr.addEventListener('error', () => { finish('failed: the connection broke', false); say('error: the upload’s connection broke', 'error'); });
  say(`Uploading ${count(picked.length)} files…`);
  xhr.send(form);
}

// ---------------------------------------------------------------- metadata

function metaTab(panel, a) {
  const how = h('select', { id: 'meta-how' }, h('option', { value: 'key' }, 'key is'), h('option', { value: 'prefix' }, 'key starts with'));
  const text = h('input', { id: 'meta-text', type: 'search', autocomplete: 'off' });
  const out = h('div', { 'aria-live': 'polite' });
  const more = h('button', { type: 'button', hidden: true }, 'Show more');
  let next = null;
  let query = null;
  const run = async (fresh) => {
    if (fresh) { next = null; query = new URLSearchParams({ [how.value]: text.value, limit: String(PAGE) }); out.replaceChildren(); }
    const q = new URLSearchParams(query);
    if (next) q.set('after', next);
    const res = await api('GET', `/archives/${enc(a.id)}/meta?${q}`);
    if (res.result === 'no_metadata') out.append(h('p', { class: 'empty', 'data-result': 'no_metadata' }, 'This archive has no metadata section: nothing was searched.'));
    else if (res.result === 'no_match') out.append(h('p', { class: 'empty', 'data-result': 'no_match' }, 'No fact matches.'));
    else out.append(factTable(res.rows, true));
    next = res.next;
    more.hidden = !next;
  };
  more.addEventListener('click', () => run(false).catch(report));
  panel.append(
    h('h2', {}, 'Search metadata'),
    h('form', { class: 'row', onsubmit: (ev) => { ev.preventDefault(); run(true).catch(report); } },
      h('label', { for: 'meta-how' }, 'Facts whose'), how,
      h('label', { for: 'meta-text', class: 'sr' }, 'Key'), text,
      h('button', { type: 'submit' }, 'Search')),
    out, more);
}

// ---------------------------------------------------------------- history

async function historyTab(panel, a) {
  const { changes } = await api('GET', `/archives/${enc(a.id)}/history`);
  panel.append(h('h2', {}, 'History'), h('p', { class: 'hint' }, 'The snapshots of the files table the catalog keeps, newest first.'));
  if (changes.length === 0) { panel.append(h('p', { class: 'empty' }, 'Nothing committed yet.')); return; }
  panel.append(h('div', { class: 'scroll' }, h('table', { class: 'history' },
    h('thead', {}, h('tr', {}, [['Append'], ['Change'], ['Time'], ['Appends', 'num'], ['Files', 'num'], ['Bytes', 'num'],
      ['Snapshot', 'wide']].map(([t, cls]) => h('th', { scope: 'col', class: cls }, t)))),
    h('tbody', {}, changes.map((c) => h('tr', {},
      h('td', {}, c.append_seq === null ? '—' : `#${c.append_seq}`),
      h('td', {}, c.kind), h('td', {}, when(c.timestamp_ms)),
      h('td', { class: 'num' }, count(c.appends)), h('td', { class: 'num' }, count(c.files)),
      h('td', { class: 'num' }, bytes(c.bytes)), h('td', { class: 'wide' }, h('code', {}, String(c.snapshot_id)))))))));
}

// ---------------------------------------------------------------- query

function queryTab(panel, a) {
  const table = /^[A-Za-z_][A-Za-z0-9_]*$/.test(a.id) ? a.id : `"${a.id}"`;
  const auth = readsPrivate
    ? "CREATE SECRET zs (TYPE iceberg, TOKEN '<token>');\nATTACH 'wh' AS z (TYPE iceberg, ENDPOINT '" + location.origin + "/iceberg', SECRET zs);"
    : `ATTACH 'wh' AS z (TYPE iceberg, ENDPOINT '${location.origin}/iceberg', AUTHORIZATION_TYPE 'none');`;
  const files = `-- the live files: the latest append of a path wins, a tombstone deletes
SELECT relative_path, sum(uncompressed_size)::BIGINT AS size
FROM (SELECT * FROM z.${table}.files
      QUALIFY append_seq = max(append_seq) OVER (PARTITION BY relative_path))
GROUP BY relative_path HAVING NOT bool_or(tombstone) ORDER BY relative_path;`;
  const meta = `-- the live metadata: the latest fact of a (key, path) wins
SELECT relative_path, key, value_type, v_str, v_i64, v_f64, v_bool, v_bytes
FROM z.${table}.meta
QUALIFY append_seq = max(append_seq) OVER (PARTITION BY key, relative_path)
    AND NOT tombstone
ORDER BY key, relative_path NULLS FIRST;`;
  const block = (title, text) => {
    const pre = h('pre', { class: 'code', tabindex: 0 }, text);
    return h('div', { class: 'panel' }, h('h3', {}, title), pre,
      h('button', { type: 'button', class: 'quiet', onclick: () => navigator.clipboard.writeText(text).then(() => say('Copied.'), () => say('Copying is not allowed here: select the text.')) }, `Copy ${title.toLowerCase()}`));
  };
  panel.append(
    h('h2', {}, 'Query with DuckDB'),
    h('p', {}, 'The archive’s index and metadata are live Iceberg tables behind this service’s REST catalog. In DuckDB 1.4 with the iceberg extension:'),
    block('Attach', auth), block('Files', files), block('Metadata', meta));
}

// ---------------------------------------------------------------- start

window.addEventListener('hashchange', route);
window.addEventListener('DOMContentLoaded', async () => {
  setupToken();
  try { await probeReads(); } catch (_) { /* route() says what is wrong */ }
  route();
});
