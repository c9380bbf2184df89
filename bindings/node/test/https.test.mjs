// HTTPS interception and credentials in Node (the proxy's behaviour is tested in
// core/engine/https_test.go and Python's test_https.py against local servers):
// the options reach the engine, the CA is written to httpCaOut, the report says
// intercepted and names the http_auth rules (never the secret), and the variable
// a credential reads is not in the run's environment.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { exitIfStuck } from './helpers.mjs';

exitIfStuck(after);

// set before the library loads: the engine reads the variable from the
// environment it started with
const secret = `sk-node-${process.pid}-${Date.now()}`;
process.env.SANDTRAP_NODE_TEST_KEY = secret;
const { Sandbox, PolicyError } = await import('sandtrap');

test('interception options, the CA written out, the credential variable kept from the run', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'st-https-'));
  const caOut = path.join(dir, 'ca.pem');
  const sb = new Sandbox({
    fsReadable: ['/usr', '/lib', '/bin', '/etc'],
    httpAllow: ['POST api.test/v1/*'],
    httpIntercept: true,
    httpInjectCa: ['/etc/ssl/certs/ca-certificates.crt'],
    httpCaOut: caOut,
    credentials: { api: 'env:SANDTRAP_NODE_TEST_KEY' },
    httpAuth: ['POST api.test/v1/* bearer api'],
  });
  try {
    const h = (await sb.isolation()).net.http;
    assert.equal(h.https, 'intercepted');
    assert.deepEqual(h.auth, ['POST api.test/v1/* bearer api']);
    assert.ok(h.ports.includes(443));
    assert.ok(!JSON.stringify(h).includes(secret));
    assert.match(fs.readFileSync(caOut, 'utf8'), /^-----BEGIN CERTIFICATE-----/);
    const r = await sb.run(['/usr/bin/env']);
    const env = r.stdout.toString();
    assert.ok(env.includes('https_proxy='), env);
    assert.ok(!env.includes(secret) && !env.includes('SANDTRAP_NODE_TEST_KEY'), env);
    const bundle = (await sb.run(['/bin/cat', '/etc/ssl/certs/ca-certificates.crt'])).stdout.toString();
    assert.ok(bundle.endsWith(fs.readFileSync(caOut, 'utf8')), 'the run sees the bundle with the CA appended');
  } finally {
    sb.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('credentials without interception and a credential no rule names are refused', () => {
  assert.throws(
    () => new Sandbox({ fsReadable: ['/usr'], httpAllow: ['GET a.test'], credentials: { k: 'env:SANDTRAP_NODE_TEST_KEY' }, httpAuth: ['GET a.test bearer k'] }),
    (e) => e instanceof PolicyError && /needs HTTPS interception/.test(e.message),
  );
  assert.throws(
    () => new Sandbox({ fsReadable: ['/usr'], httpAllow: ['GET a.test'], httpIntercept: true, credentials: { k: 'nope' } }),
    (e) => e instanceof PolicyError && /is not "env:VARIABLE"/.test(e.message),
  );
});
