// The seed's port virtualization example, in Node: two sandboxes bind virtual port
// 8080 at once; ports() gives each one's real port; the sandbox's name is its hostname.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';

import { Sandbox } from 'sandtrap';
import { exitIfStuck } from './helpers.mjs';

exitIfStuck(after);

const SERVER = `import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080))
s.listen(8)
c = socket.create_connection(("127.0.0.1", 8080), timeout=5)
for _ in range(2):  # its own client and the host's, in either order
    a, _ = s.accept(); a.sendall(sys.argv[1].encode()); a.close()
assert c.recv(64).decode() == sys.argv[1]
print(s.getsockname()[1], socket.gethostname(), flush=True)
`;

const read = (port) =>
  new Promise((resolve, reject) => {
    const c = net.connect(port, '127.0.0.1');
    let got = '';
    c.on('data', (d) => (got += d));
    c.on('end', () => resolve(got));
    c.on('error', reject);
  });

test('port virtualization and name', async () => {
  const sbs = [0, 1].map(() => new Sandbox({ portRemap: true, netAllowBind: [8080], fsReadable: ['/usr', '/lib', '/etc'], name: 'api.local' }));
  after(() => sbs.forEach((sb) => sb.close()));
  const runs = sbs.map((sb, i) => sb.run(['/usr/bin/python3', '-c', SERVER, `server${i}`], { timeout: 30 }));
  const reals = [];
  for (const sb of sbs) {
    let ports = {};
    for (let i = 0; i < 200 && Object.keys(ports).length === 0; i++) {
      ports = await sb.ports();
      if (Object.keys(ports).length === 0) await new Promise((r) => setTimeout(r, 50));
    }
    assert.deepEqual(Object.keys(ports), ['8080']);
    reals.push(ports[8080]);
  }
  assert.notEqual(reals[0], reals[1]);
  for (const [i, real] of reals.entries()) assert.equal(await read(real), `server${i}`);
  for (const r of await Promise.all(runs)) {
    assert.ok(r.success, r.stderr.toString());
    assert.equal(r.stdout.toString(), '8080 api.local\n');
  }
  assert.deepEqual(await sbs[0].ports(), {});
  assert.equal((await sbs[0].isolation()).hostname, 'api.local');
});
