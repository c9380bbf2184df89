// The cross-binding scenarios through the Node binding (tests/cross/test_cross.py runs
// the same ones through Python and compares the results field by field). Prints one
// JSON object: scenario name -> result, bytes as UTF-8 text.
//
//   node tests/cross/scenarios.mjs '{"root": DIR, "python": PATH, "sys": [...]}'
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const { Sandbox, sandbox } = require(path.join(here, '../../bindings/node/index.js'));

const cfg = JSON.parse(process.argv[2]);
const SYS = cfg.sys;
const out = {};

// Buffers as text (JSON), everything else as it is
const plain = (v) => JSON.parse(JSON.stringify(v, (k, x) => (x && x.type === 'Buffer' && Array.isArray(x.data) ? Buffer.from(x.data).toString() : x)));

async function scenario(name, fn) {
  try {
    out[name] = plain(await fn());
  } catch (e) {
    out[name] = { raised: e.code ?? e.name, message: e.message };
  }
}

const sb = new Sandbox({ fsReadable: SYS });
await scenario('run', () => sb.run(['sh', '-c', 'echo out; echo err >&2; exit 3']));
await scenario('missing program', () => sb.run(['no-such-program-xyz']));
await scenario('pipeline', () => sb.cmd(['printf', 'a\\nb\\n']).pipe(sb.cmd(['wc', '-l'])).run());
await scenario('pipeline with a missing stage', () => sb.cmd(['no-such-program-xyz']).pipe(sb.cmd(['cat'])).run());
await scenario('timeout', () => sb.run(['sleep', '5'], { timeout: 0.3 }));
process.env.SANDTRAP_CROSS_VAR = 'set after load';
await scenario('environment', () => {
  const e = new Sandbox({ fsReadable: SYS });
  return e.run(['sh', '-c', 'echo "$SANDTRAP_CROSS_VAR"']).finally(() => e.close());
});
await scenario('limits', () => {
  const l = new Sandbox({ fsReadable: SYS, maxMemory: '256M', maxProcesses: 10, maxOpenFiles: 64, maxDisk: '1M', maxCpuTime: 5 });
  return l.isolation().finally(() => l.close());
});

for (const level of ['process', 'kernel']) {
  await scenario(`coop ${level}`, async () => {
    const functions = {
      add: (a, b) => a + b,
      fail: () => {
        const e = new Error('from the host');
        e.name = 'HostFailure'; // the exception's type name, as the Python scenario's
        throw e;
      },
    };
    const py = sandbox({ timeout: 10, functions }, { isolation: level, filesystem: cfg.root, python: cfg.python });
    try {
      const code =
        "x = add(2, 3)\nprint('x is', x)\ntry:\n    fail()\nexcept Exception as e:\n    m = str(e)\nwith open('f.txt', 'w') as f:\n    f.write('hi')\n";
      const first = await py.exec(code);
      const second = await py.exec('y = x + 1\n1/0');
      return { first, second };
    } finally {
      py.close();
    }
  });
}

await scenario('fork and reduce', async () => {
  const mapper = new Sandbox({ fsReadable: SYS, maxOutput: 100 });
  const reducer = new Sandbox({ fsReadable: SYS });
  try {
    const clones = await mapper.fork(4, {
      init: 'base = 40',
      work: "import sys\nprint(base + CLONE_ID)\nif CLONE_ID == 2:\n    print('x' * 200)\nif CLONE_ID == 3:\n    sys.exit(5)",
      python: cfg.python,
    });
    const reduced = await reducer.reduce([cfg.reducer_python, '-c', 'import sys; print(sum(int(l) for l in sys.stdin if len(l) < 10))'], clones);
    return { clones: [...clones], isolation: clones.isolation, reduced };
  } finally {
    mapper.close();
    reducer.close();
  }
});

sb.close();
process.stdout.write(JSON.stringify(out));
