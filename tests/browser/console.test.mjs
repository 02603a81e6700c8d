// The web console in a real browser: Debian's Chromium, headless, driven by
// Playwright against a real `znippy serve` on loopback with a token. Run by
// scripts/test (which installs both); alone:
//   ZNIPPY_BIN=target/debug/znippy node --test tests/browser/console.test.mjs
// Screenshots go to $ZNIPPY_SCREENSHOTS (default target/console-screenshots).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const ROOT = resolve(import.meta.dirname, '../..');
const BIN = process.env.ZNIPPY_BIN || join(ROOT, 'target/debug/znippy');
const SHOTS = process.env.ZNIPPY_SCREENSHOTS || join(ROOT, 'target/console-screenshots');
const TOKEN = 'console-test-token';
// The same flags the machine's notes give: no sandbox as root, and no
// background connections to a network that is closed.
const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

let tmp, base, browser;
const servers = [];

// `znippy serve` with the token (and `flags`) on a free port: its address.
async function serve(name, flags) {
  const proc = spawn(BIN, ['serve', '--data', join(tmp, name), '--listen', '127.0.0.1:0',
    '--threads', '2', '--token', TOKEN, '--log', 'warn', ...flags], { stdio: ['ignore', 'pipe', 'inherit'] });
  servers.push(proc);
  // The one line on stdout says the port.
  const line = await new Promise((ok, fail) => {
    createInterface({ input: proc.stdout }).once('line', ok);
    proc.once('exit', (code) => fail(new Error(`znippy serve exited with ${code}`)));
  });
  const m = /^listening on (http:\/\/127\.0\.0\.1:\d+)$/.exec(line);
  assert.ok(m, line);
  return m[1];
}

before(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'znippy-console-'));
  mkdirSync(SHOTS, { recursive: true });
  // The service signs its seals, with a key and certificate openssl makes.
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256',
    '-nodes', '-keyout', join(tmp, 'sign.key'), '-out', join(tmp, 'sign.pem'), '-days', '2',
    '-subj', '/CN=console signer'], { stdio: 'ignore' });
  base = await serve('data', ['--sign-key', join(tmp, 'sign.key'), '--sign-cert', join(tmp, 'sign.pem')]);
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args: CHROMIUM_ARGS });
});

after(async () => {
  await browser?.close();
  for (const proc of servers.filter((p) => p.exitCode === null)) {
    const exited = new Promise((ok) => proc.once('exit', ok));
    proc.kill('SIGTERM');
    assert.equal(await exited, 0, 'the service stops cleanly');
  }
  rmSync(tmp, { recursive: true, force: true });
});

async function newPage(viewport) {
  const context = await browser.newContext({ acceptDownloads: true, viewport: viewport || { width: 1200, height: 900 } });
  const page = await context.newPage();
  page.on('dialog', (d) => d.accept());
  const problems = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error' && !/status of 40[13]/.test(m.text())) problems.push(`console: ${m.text()}`); });
  return { page, problems };
}

// Every input and select has a name a screen reader reads.
async function unlabelled(page) {
  return page.evaluate(() => [...document.querySelectorAll('input, select')]
    .filter((e) => e.labels.length === 0 && !e.getAttribute('aria-label'))
    .map((e) => e.outerHTML));
}

// A tab of the archive view, once its view has replaced the last one.
async function openTab(page, name, heading) {
  await page.getByRole('link', { name, exact: true }).click();
  await page.getByRole('heading', { name: heading, exact: true }).waitFor();
}

async function status(page, re) {
  await page.locator('#status').filter({ hasText: re }).waitFor();
  return page.locator('#status').textContent();
}

async function api(method, path, body, headers, at) {
  const r = await fetch((at || base) + path, { method, body, headers: { Authorization: `Bearer ${TOKEN}`, ...(headers || {}) } });
  assert.ok(r.ok, `${method} ${path}: ${r.status} ${await r.clone().text()}`);
  return r;
}

// A 1x1 PNG.
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64');

test('create, upload a folder, browse, preview, search, delete, seal and download', async () => {
  const site = join(tmp, 'site');
  mkdirSync(join(site, 'docs/guide'), { recursive: true });
  mkdirSync(join(site, 'img'));
  writeFileSync(join(site, 'docs/readme.md'), '# Readme\n\nhello console\n');
  writeFileSync(join(site, 'docs/guide/intro.txt'), 'an introduction\n'.repeat(100));
  writeFileSync(join(site, 'img/dot.png'), PNG);
  writeFileSync(join(site, 'data.json'), '{"a": 1}\n');

  const { page, problems } = await newPage();
  await page.goto(base + '/');
  await page.getByRole('heading', { name: 'Archives' }).waitFor();
  assert.deepEqual(await unlabelled(page), []);
  // The first Tab reaches the skip link.
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.textContent), 'Skip to content');

  // Without the token, creating is refused with the service's own message,
  // and the console asks for the token.
  await page.getByLabel('Id (letters, digits, _ and -)').fill('site');
  await page.getByRole('button', { name: 'Create' }).click();
  await status(page, /^unauthorized: this request needs 'Authorization: Bearer <token>'$/);
  await page.getByLabel('Bearer token').fill(TOKEN);
  await page.getByRole('button', { name: 'Use token' }).click();
  await page.getByRole('button', { name: 'Create' }).click();
  await page.getByRole('heading', { name: /^site/ }).waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.getItem('znippy-token')), TOKEN);
  assert.equal(await page.evaluate(() => document.cookie), '');
  assert.ok(!page.url().includes(TOKEN));

  // An upload without the token shows the service's error as it is.
  await page.getByRole('button', { name: /^Token/ }).click();
  await page.getByRole('button', { name: 'Forget' }).click();
  await page.setInputFiles('#up-files', join(site, 'data.json'));
  await status(page, /^unauthorized: /);
  await page.locator('ul.progress').filter({ hasText: 'failed: unauthorized' }).waitFor();
  await page.getByLabel('Bearer token').fill(TOKEN);
  await page.getByRole('button', { name: 'Use token' }).click();

  // A whole folder, as one append.
  await page.setInputFiles('#up-folder', site);
  await status(page, /^Stored 4 files/);
  assert.ok(await page.$$eval('ul.progress progress', (ps) => ps.length === 4 && ps.every((p) => p.value === p.max)));
  await page.screenshot({ path: join(SHOTS, 'uploaded.png'), fullPage: true });

  // Browse: the root folds site/ into one row; into it, then into docs/.
  await page.getByRole('link', { name: 'site/' }).click();
  await page.getByRole('link', { name: 'docs/' }).waitFor();
  assert.deepEqual(await page.locator('table.files tbody th').allTextContents(), ['data.json', 'docs/', 'img/']);
  await page.getByRole('link', { name: 'docs/' }).click();
  await page.getByRole('link', { name: 'guide/' }).waitFor();
  assert.deepEqual(await page.locator('table.files tbody th').allTextContents(), ['guide/', 'readme.md']);

  // Preview a text file; it has no facts, as the archive has no metadata.
  await page.getByRole('button', { name: 'Preview site/docs/readme.md' }).click();
  await page.locator('pre.text').filter({ hasText: 'hello console' }).waitFor();
  await page.locator('[data-result=no_metadata]').waitFor();
  // A search now says there is no metadata, not that nothing matched.
  await openTab(page, 'Metadata', 'Search metadata');
  await page.getByLabel('Key').fill('lang');
  await page.getByRole('button', { name: 'Search' }).click();
  await page.locator('[data-result=no_metadata]').waitFor();

  // Set a fact from the preview, then find it by key; another key matches nothing.
  await openTab(page, 'Files', 'Upload');
  await page.getByRole('link', { name: 'site/' }).click();
  await page.getByRole('link', { name: 'docs/' }).click();
  await page.getByRole('button', { name: 'Preview site/docs/readme.md' }).click();
  await page.getByLabel('Key', { exact: true }).fill('lang');
  await page.getByLabel('Value').fill('en');
  await page.getByRole('button', { name: 'Set fact' }).click();
  await page.locator('.facts-of td', { hasText: 'en' }).waitFor();
  // The archive's numbers follow: it has a metadata section now, two appends.
  await page.locator('main > div > dl.facts dd', { hasText: /^yes$/ }).waitFor();
  assert.equal(await page.locator('main > div > dl.facts dd').nth(3).textContent(), '2');
  await page.screenshot({ path: join(SHOTS, 'preview.png'), fullPage: true });
  await openTab(page, 'Metadata', 'Search metadata');
  await page.getByLabel('Key').fill('lang');
  await page.getByRole('button', { name: 'Search' }).click();
  await page.locator('td', { hasText: 'site/docs/readme.md' }).waitFor();
  await page.getByLabel('Key').fill('color');
  await page.getByRole('button', { name: 'Search' }).click();
  await page.locator('[data-result=no_match]').waitFor();

  // An image preview decodes.
  await openTab(page, 'Files', 'Upload');
  await page.getByRole('link', { name: 'site/' }).click();
  await page.getByRole('link', { name: 'img/' }).click();
  await page.getByRole('button', { name: 'Preview site/img/dot.png' }).click();
  const img = page.getByRole('img', { name: 'Preview of site/img/dot.png' });
  await img.waitFor();
  await page.waitForFunction(() => document.querySelector('.preview img')?.complete);
  assert.equal(await img.evaluate((i) => i.naturalWidth), 1);

  // Delete one file.
  await page.getByRole('link', { name: 'site/', exact: true }).click();
  await page.getByRole('button', { name: 'Delete site/data.json' }).click();
  await status(page, /^Deleted site\/data\.json/);
  await page.getByRole('link', { name: 'docs/' }).waitFor();
  assert.deepEqual(await page.locator('table.files tbody th').allTextContents(), ['docs/', 'img/']);

  // The history: newest first, the delete, the fact, the upload.
  await openTab(page, 'History', 'History');
  await page.locator('table.history').waitFor();
  const kinds = await page.locator('table.history tbody tr td:nth-child(2)').allTextContents();
  assert.deepEqual(kinds, ['delete', 'append', 'append']);
  assert.deepEqual(await page.locator('table.history tbody tr td:nth-child(5)').allTextContents(), ['—', '0', '4']);

  // The query page, filled in with this service's address.
  await openTab(page, 'Query', 'Query with DuckDB');
  await page.locator('pre.code', { hasText: `ENDPOINT '${base}/iceberg'` }).waitFor();
  await page.locator('pre.code', { hasText: 'FROM z.site.files' }).waitFor();

  // Seal, then download: the file's SHA-256 is the one the report gives.
  await openTab(page, 'Files', 'Upload');
  await page.getByRole('button', { name: 'Seal…' }).click();
  await page.locator('#seal-sha256').filter({ hasText: /^[0-9a-f]{64}$/ }).waitFor();
  const shown = await page.locator('#seal-sha256').textContent();
  await page.locator('#seal-signer', { hasText: 'by CN=console signer' })
    .getByRole('link', { name: 'signature (DER CMS)' }).waitFor();
  // The archive's page says so too, for as long as it is sealed.
  await page.locator('#archive-signer', { hasText: 'by CN=console signer' }).waitFor();
  await page.screenshot({ path: join(SHOTS, 'sealed.png'), fullPage: true });
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.locator('#seal-report').getByRole('link', { name: 'Download site.znippy' }).click(),
  ]);
  const saved = join(tmp, 'site.znippy');
  await download.saveAs(saved);
  const sha = createHash('sha256').update(readFileSync(saved)).digest('hex');
  assert.equal(sha, shown);
  const report = await (await api('POST', '/archives/site/seal')).json();
  const line = await (await api('GET', report.sha256)).text();
  assert.equal(line, `${sha}  site.znippy\n`, 'what sha256sum prints');
  assert.deepEqual(problems, []);
});

test('phone width: nothing overflows, every control is labelled', async () => {
  const { page, problems } = await newPage({ width: 375, height: 740 });
  await page.goto(base + '/');
  await page.evaluate((t) => sessionStorage.setItem('znippy-token', t), TOKEN);
  await api('POST', '/archives', JSON.stringify({ id: 'phone' }));
  const form = new FormData();
  form.append('f', new Blob(['text\n']), 'a/very/long/directory/name/that/wraps/somewhere/file-with-a-long-name.txt');
  form.append('f', new Blob(['x']), 'top.txt');
  await api('POST', '/archives/phone/files', form);
  // The last one is not percent-encoding: the archives, not a page error.
  for (const hash of ['#/', '#/a/phone', '#/a/phone/meta', '#/a/phone/history', '#/a/phone/query', '#/a/%zz']) {
    await page.goto(`${base}/${hash}`);
    await page.locator('main h1, main h2').first().waitFor();
    await page.waitForLoadState('networkidle');
    const [scroll, width] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
    assert.ok(scroll <= width, `${hash}: the page is ${scroll} px wide at ${width}`);
    assert.deepEqual(await unlabelled(page), [], hash);
  }
  await page.goto(`${base}/#/a/phone`);
  await page.getByRole('link', { name: 'a/' }).waitFor();
  await page.screenshot({ path: join(SHOTS, 'phone.png'), fullPage: true });

  // Files dropped on the drop zone are one upload into the directory shown.
  await page.getByRole('link', { name: 'a/' }).click();
  await page.getByRole('link', { name: 'very/' }).waitFor();
  const dropped = await page.evaluateHandle(() => {
    const dt = new DataTransfer();
    dt.items.add(new File(['one\n'], 'dropped-1.txt'));
    dt.items.add(new File(['two\n'], 'dropped-2.txt'));
    return dt;
  });
  await page.locator('.zone').dispatchEvent('drop', { dataTransfer: dropped });
  await status(page, /^Stored 2 files/);
  await page.getByRole('rowheader', { name: 'dropped-2.txt' }).waitFor();
  const got = await (await api('GET', '/archives/phone/files/a/dropped-1.txt')).text();
  assert.equal(got, 'one\n');
  assert.deepEqual(problems, []);
});

test('a package: its preview shows what the plugin read from it', async () => {
  const { page, problems } = await newPage();
  await page.goto(base + '/');
  await page.evaluate((t) => sessionStorage.setItem('znippy-token', t), TOKEN);
  await api('POST', '/archives', JSON.stringify({ id: 'pkgs', repo: 'central' }));
  // A real jar (scripts/packages downloads it), and a file that is no package.
  const jar = readFileSync(join(ROOT, '.packages/commons-lang3-3.12.0.jar'));
  const form = new FormData();
  form.append('f', new Blob([jar]), 'lib/commons-lang3-3.12.0.jar');
  form.append('f', new Blob(['plain\n']), 'lib/notes.txt');
  await api('POST', '/archives/pkgs/files', form);
  await page.goto(`${base}/#/a/pkgs`);
  await page.getByRole('link', { name: 'lib/' }).click();
  await page.getByRole('button', { name: 'Preview lib/commons-lang3-3.12.0.jar' }).click();
  await page.getByRole('heading', { name: 'Package (maven, central)' }).waitFor();
  const cell = (name) => page.locator('table.package tr', { has: page.getByRole('rowheader', { name, exact: true }) }).locator('td');
  assert.equal(await cell('artifact_id').textContent(), 'commons-lang3');
  assert.equal(await cell('version').textContent(), '3.12.0');
  await page.screenshot({ path: join(SHOTS, 'package.png'), fullPage: true });
  await page.getByRole('button', { name: 'Preview lib/notes.txt' }).click();
  await page.locator('pre.text').filter({ hasText: 'plain' }).waitFor();
  assert.equal(await page.locator('.package-of h3').count(), 0);
  assert.deepEqual(problems, []);
});

// A tar stream of `paths`, each holding its own name.
function tarOf(paths) {
  const blocks = [];
  for (const p of paths) {
    const data = Buffer.from(p);
    const head = Buffer.alloc(512);
    head.write(p, 0, 100);
    head.write('0000644\0', 100);
    head.write('0000000\0', 108);
    head.write('0000000\0', 116);
    head.write(`${data.length.toString(8).padStart(11, '0')}\0`, 124);
    head.write('00000000000\0', 136);
    head.write('        ', 148);
    head.write('0', 156);
    head.write('ustar\x0000', 257);
    let sum = 0;
    for (const b of head) sum += b;
    head.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
    blocks.push(head, data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

test('a large archive: the browser gets a page at a time, never the listing', async () => {
  // 400 directories of 50 files at the root: 20,000 files.
  const paths = [];
  for (let d = 0; d < 400; d++) for (let f = 0; f < 50; f++) paths.push(`d${String(d).padStart(3, '0')}/f${f}.txt`);
  await api('POST', '/archives', JSON.stringify({ id: 'big' }));
  await api('POST', '/archives/big/files', tarOf(paths), { 'Content-Type': 'application/x-tar' });

  const { page, problems } = await newPage();
  const pages = [];
  page.on('response', (r) => {
    if (new URL(r.url()).pathname === '/archives/big/files') {
      pages.push(r.json().then((v) => v.files.length + (v.dirs || []).length));
    }
  });
  await page.goto(`${base}/#/a/big`);
  await page.getByRole('link', { name: 'd000/' }).waitFor();
  assert.equal(await page.locator('table.files tbody tr').count(), 200);
  await page.getByRole('button', { name: 'Show more' }).click();
  await page.getByRole('link', { name: 'd399/' }).waitFor();
  assert.equal(await page.locator('table.files tbody tr').count(), 400);
  assert.ok(await page.getByRole('button', { name: 'Show more' }).isHidden());
  // Into one directory: its 50 files, one page.
  await page.getByRole('link', { name: 'd123/' }).click();
  await page.getByRole('rowheader', { name: 'f49.txt' }).waitFor();
  // Filtering within it asks the service for the prefix alone.
  await page.getByLabel('Filter this directory').fill('f4');
  await page.getByRole('rowheader', { name: 'f49.txt' }).waitFor();
  await page.waitForFunction(() => document.querySelectorAll('table.files tbody tr').length === 11);
  const listed = await Promise.all(pages);
  assert.ok(listed.every((n) => n <= 200), `pages of at most 200: ${listed}`);
  const received = listed.reduce((a, b) => a + b, 0);
  assert.ok(received < 600, `the browser received ${received} entries of 20,400`);

  // Dropped from the list, after the confirmation.
  await page.evaluate((t) => sessionStorage.setItem('znippy-token', t), TOKEN);
  await page.goto(`${base}/#/`);
  await page.getByRole('button', { name: 'Drop archive big' }).click();
  await status(page, /^Dropped big/);
  await page.getByRole('link', { name: 'site' }).waitFor();
  assert.equal(await page.getByRole('button', { name: 'Drop archive big' }).count(), 0);
  assert.equal((await fetch(`${base}/archives/big`)).status, 404);
  assert.deepEqual(problems, []);
});

test('private reads: the console asks for the token, and downloads send it', async () => {
  const at = await serve('private', ['--private-reads']);
  await api('POST', '/archives', JSON.stringify({ id: 'secret' }), {}, at);
  await api('PUT', '/archives/secret/files/notes/plan.txt', 'for your eyes only\n', {}, at);
  const { page } = await newPage();
  await page.goto(`${at}/`);
  await status(page, /^unauthorized: /);
  await page.getByLabel('Bearer token').fill(TOKEN);
  await page.getByRole('button', { name: 'Use token' }).click();
  await page.getByRole('link', { name: 'secret' }).click();
  await page.getByRole('link', { name: 'notes/' }).click();
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.getByRole('link', { name: 'Download notes/plan.txt' }).click(),
  ]);
  const saved = join(tmp, 'plan.txt');
  await download.saveAs(saved);
  assert.equal(readFileSync(saved, 'utf8'), 'for your eyes only\n');
});
