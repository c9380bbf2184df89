#!/usr/bin/env bash
# The installs of the packaging test, run by tests/packaging/run.sh in a mount
# namespace where the repository is hidden. Usage: inside.sh TMP REPO OTHER_PYTHON PASSED
# (PASSED: how many checks run.sh passed before; the closing line counts them all)
set -euo pipefail
tmp="$1" repo="$2" other="$3" passed="$4"
cd "$tmp"
pass() { echo "packaging: ok   $*"; passed=$((passed + 1)); }
fail() { echo "packaging: FAIL $*" >&2; exit 1; }

[ ! -e "$repo/go.mod" ] && [ -z "$(ls -A "$repo" 2>/dev/null)" ] || fail "the repository $repo is still visible"
pass "the repository is hidden ($repo is empty)"
unset PYTHONPATH SANDTRAP_LIB SANDTRAP_ADDON PYTHONHOME VIRTUAL_ENV
export PIP_DISABLE_PIP_VERSION_CHECK=1

# ---- Python: the wheel, into a fresh venv of another Python version
whl="$(ls "$tmp"/dist/sandtrap-*.whl)"
"$other" -m venv "$tmp/venv-wheel"
py="$tmp/venv-wheel/bin/python"
"$py" -m pip install -q "$whl[kernel]"
"$py" - "$tmp/venv-wheel" <<'EOF'
import sys, sandtrap, sandtrap_guest
from sandtrap import _native
venv = sys.argv[1]
_native.lib()
for what, p in [("sandtrap", sandtrap.__file__), ("sandtrap_guest", sandtrap_guest.__file__), ("libsandtrap.so", _native.lib_path())]:
    assert p.startswith(venv + "/"), f"{what} loaded from {p}, not from the venv"
print(f"packaging: Python {sys.version.split()[0]}: sandtrap {sandtrap.__version__}, library {_native.version()} from {_native.lib_path()}")
EOF
pass "the wheel installs into $("$py" -V) (with the [kernel] extra) and loads from the venv"
python3 "$tmp/t/snippets.py" run "$tmp/snippets" --only py --python "$py"
pass "the READMEs' Python blocks run with the installed wheel"
# the sandtrap command and the MCP server, as console scripts of the wheel ([mcp] extra)
"$py" -m pip install -q "$whl[mcp]"
bin="$tmp/venv-wheel/bin"
out="$("$bin/sandtrap" run -r /usr -r /lib -- /bin/sh -c 'echo from-the-cli; exit 7')" && rc=0 || rc=$?
[ "$rc" = 7 ] && [ "$out" = from-the-cli ] || fail "the wheel's sandtrap command: exit $rc, output '$out'"
init='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"packaging","version":"1"}}}'
echo "$init" | timeout 20 "$bin/sandtrap-mcp" | grep -q '"serverInfo":{"name":"sandtrap"' || fail "the wheel's sandtrap-mcp does not answer initialize"
pass "the wheel's sandtrap command (exit code passed through) and sandtrap-mcp (pip install 'sandtrap[mcp]')"

# ---- Python: the sdist, built from source with the Go modules it carries
"$other" -m venv "$tmp/venv-sdist"
sdist_start=$(date +%s)
GOFLAGS=-mod=vendor GOPROXY=off GOMODCACHE="$tmp/gomodcache" \
  "$tmp/venv-sdist/bin/python" -m pip install -q "$(ls "$tmp"/dist/sandtrap-*.tar.gz)"
"$tmp/venv-sdist/bin/python" -c '
from sandtrap import Sandbox, _native
r = Sandbox(fs_readable=["/usr", "/lib"], clean_env=True).run(["echo", "from the sdist"])
assert r.success and r.stdout == b"from the sdist\n", r
assert _native.lib_path().startswith("'"$tmp"'/venv-sdist/"), _native.lib_path()
'
pass "the sdist builds from source (no module download) in $(( $(date +%s) - sdist_start ))s and runs"

# ---- Node: the tarball, into a fresh project, with no toolchain on PATH
tgz="$(ls "$tmp"/dist/sandtrap-*.tgz)"
proj="$tmp/node-project"
mkdir -p "$proj" "$tmp/bin"
ln -s "$(command -v node)" "$tmp/bin/node"
ln -s "$(command -v npm)" "$tmp/bin/npm"
printf '{ "name": "consumer", "version": "1.0.0", "private": true }\n' >"$proj/package.json"
printf 'lib:\n\ttouch %s/consumer-makefile-ran\n' "$tmp" >"$proj/Makefile"
(cd "$proj" && PATH="$tmp/bin" npm install --no-audit --no-fund --foreground-scripts --loglevel=info "$tgz") >"$tmp/npm.log" 2>&1 \
  || { cat "$tmp/npm.log"; fail "npm install of the tarball"; }
if grep -E '^> sandtrap@|install-scripts|gyp ' "$tmp/npm.log"; then fail "npm ran or flagged a script of sandtrap (above)"; fi
[ ! -e "$tmp/consumer-makefile-ran" ] || fail "the consumer project's Makefile ran"
[ ! -e "$proj/node_modules/sandtrap/build" ] || fail "something was built in node_modules/sandtrap/build"
node -e '
const s = require(process.argv[1]).scripts || {};
const bad = ["preinstall", "install", "postinstall", "prepare"].filter((k) => k in s);
if (bad.length) { console.error("lifecycle scripts:", bad); process.exit(1); }
' "$proj/node_modules/sandtrap/package.json"
pass "npm install of the tarball ran no script, with no compiler or make on PATH"
cat >"$proj/check.cjs" <<'EOF'
const { Sandbox, version } = require('sandtrap');
const native = require(require('node:path').join(__dirname, 'node_modules/sandtrap/lib/native.js'));
if (!native.path.includes('/node_modules/sandtrap/prebuilds/linux-x64/')) throw new Error(`addon from ${native.path}`);
(async () => {
  const r = await new Sandbox({ fsReadable: ['/usr', '/lib'] }).run(['echo', 'cjs']);
  if (r.stdout.toString() !== 'cjs\n') throw new Error(`stdout ${r.stdout}`);
  console.log(`CommonJS: sandtrap ${version().library}, addon ${native.path}`);
})().catch((e) => { console.error(e); process.exit(1); });
EOF
cat >"$proj/check.mjs" <<'EOF'
import sandtrap, { Sandbox } from 'sandtrap';
if (sandtrap.Sandbox !== Sandbox) throw new Error('ESM and CJS entry points differ');
const r = await new Sandbox({ fsReadable: ['/usr', '/lib'] }).run(['echo', 'esm']);
if (r.stdout.toString() !== 'esm\n') throw new Error(`stdout ${r.stdout}`);
console.log('ES module: ok');
EOF
(cd "$proj" && node check.cjs && node check.mjs)
pass "the prebuilt addon loads through the CommonJS and the ES module entry points"
out="$(cd "$proj" && PATH="$tmp/bin" ./node_modules/.bin/sandtrap run -r /usr -r /lib -- /bin/sh -c 'echo npm-cli; exit 6')" && rc=0 || rc=$?
[ "$rc" = 6 ] && [ "$out" = npm-cli ] || fail "the npm package's sandtrap bin: exit $rc, output '$out'"
(cd "$proj" && echo "$init" | timeout 20 env PATH="$tmp/bin" ./node_modules/.bin/sandtrap-mcp) | grep -q '"serverInfo":{"name":"sandtrap"' \
  || fail "the npm package's sandtrap-mcp bin does not answer initialize"
pass "the npm package's sandtrap and sandtrap-mcp bins (the prebuilt command)"
python3 "$tmp/t/snippets.py" run "$tmp/snippets" --only js --node-project "$proj"
pass "the READMEs' JavaScript blocks run in the project"

# ---- C: the installed library through pkg-config
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
flags="$(pkg-config --cflags --libs sandtrap)"
echo "packaging: pkg-config --cflags --libs sandtrap: $flags"
cc -std=c99 -pedantic -Wall -Wextra -Werror -o "$tmp/typed" "$tmp/t/typed.c" $flags
readelf -d "$tmp/typed" | grep -q 'NEEDED.*\[libsandtrap\.so\.0\]' || fail "the client does not record NEEDED libsandtrap.so.0"
LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/typed"
LD_LIBRARY_PATH="$tmp/prefix/lib" python3 "$tmp/t/snippets.py" run "$tmp/snippets" --only c --cflags "$flags"
pass "the installed C library: tests/c/typed.c and the README's C block (pkg-config, soname libsandtrap.so.0)"
echo "packaging: $passed passed, 0 failed"
