"""The npm packages: `ckptd` with one optionalDependency per platform package (os/cpu fields, the
esbuild model), and, with Go removed from PATH, a fresh npm project that installs the packed
tarballs, runs the TypeScript README quick start as printed (as JavaScript and type-checked as
TypeScript), requires the client from CommonJS, and runs `npx ckptd`. Also #19 point 5: the
package installs from a fresh checkout's folder and from its `npm pack`, without a manual build."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path
from typing import Dict

import pytest

from conftest import NPM_PLATFORMS, ROOT, TARGETS, VERSION, git_commit, need, no_go_env, npm_ok, readme_block, run, ts_node_modules

TS = ROOT / "clients" / "ts"
TS_README = TS / "README.md"
OS_CPU = {"linux-x64": ("linux", "x64"), "linux-arm64": ("linux", "arm64"), "darwin-x64": ("darwin", "x64"),
          "darwin-arm64": ("darwin", "arm64"), "win32-x64": ("win32", "x64")}


def tgz_json(path: Path) -> Dict:
    with tarfile.open(path) as tf:
        return json.load(tf.extractfile("package/package.json"))


def test_npm_package_metadata(dist: Path) -> None:
    main = tgz_json(dist / "npm" / ("ckptd-%s.tgz" % VERSION))
    assert main["name"] == "ckptd" and main["version"] == VERSION
    assert main["optionalDependencies"] == {"@ckptd/" + p: VERSION for p in OS_CPU}
    assert "scripts" not in main and "devDependencies" not in main and "dependencies" not in main
    assert main["bin"] == {"ckptd": "bin/ckptd.cjs"}
    for sub in (".", "./langgraph"):
        e = main["exports"][sub]
        assert set(e) == {"import", "require"} and set(e["import"]) == set(e["require"]) == {"types", "default"}
    with tarfile.open(dist / "npm" / ("ckptd-%s.tgz" % VERSION)) as tf:
        names = set(tf.getnames())
        launcher = tf.getmember("package/bin/ckptd.cjs")
    assert launcher.mode & 0o111
    for f in ("dist/esm/index.js", "dist/esm/index.d.ts", "dist/cjs/index.js", "dist/cjs/index.d.ts",
              "dist/cjs/package.json", "dist/esm/langgraph.js", "dist/cjs/langgraph.js", "README.md"):
        assert "package/" + f in names, f

    for target in TARGETS:
        plat = NPM_PLATFORMS[target]
        tgz = dist / "npm" / ("ckptd-%s-%s.tgz" % (plat, VERSION))
        pj = tgz_json(tgz)
        os_, cpu = OS_CPU[plat]
        assert (pj["name"], pj["version"], pj["os"], pj["cpu"]) == ("@ckptd/" + plat, VERSION, [os_], [cpu])
        exe = "ckptd.exe" if os_ == "win32" else "ckptd"
        with tarfile.open(tgz) as tf:
            m = tf.getmember("package/bin/" + exe)
            assert m.mode & 0o777 == 0o755
            assert tf.extractfile(m).read() == (dist / "bin" / target / exe).read_bytes()
            assert sorted(tf.getnames()) == ["package/README.md", "package/bin/" + exe, "package/package.json"]


def npm_project(path: Path, env: Dict[str, str]) -> Path:
    path.mkdir(parents=True)
    run(["npm", "init", "-y"], cwd=path, env=env)
    return path


def tsc(project: Path, files, env: Dict[str, str], module: str = "nodenext") -> None:
    """Type-checks files in project against the installed package's types (strict)."""
    t = ts_node_modules() / "typescript" / "bin" / "tsc"
    need("TypeScript in clients/ts/node_modules", t.exists(), "cd clients/ts && npm ci")
    run(["node", t, "--noEmit", "--strict", "--skipLibCheck", "--module", module, "--moduleResolution", module,
         "--target", "es2022", "--types", "node", "--typeRoots", ts_node_modules() / "@types"] + list(files), cwd=project, env=env)


def test_fresh_npm_project_installs_the_tarballs_and_runs_the_readme_quick_start(dist: Path, tmp_path: Path) -> None:
    need("node and npm", npm_ok(), "Node.js 20+ with npm")
    if os.uname().sysname != "Linux" or os.uname().machine != "x86_64":
        pytest.skip("installs the linux-x64 package")
    env = no_go_env({"npm_config_update_notifier": "false", "npm_config_audit": "false", "npm_config_fund": "false"})
    app = npm_project(tmp_path / "app", env)
    main = dist / "npm" / ("ckptd-%s.tgz" % VERSION)
    plat = dist / "npm" / ("ckptd-linux-x64-%s.tgz" % VERSION)
    # --offline: the other platforms' optional packages are skipped without asking the registry
    run(["npm", "install", "--offline", main, plat], cwd=app, env=env)
    assert (app / "node_modules" / "@ckptd" / "linux-x64" / "bin" / "ckptd").exists()
    assert not (app / "node_modules" / "@ckptd" / "darwin-arm64").exists()

    quick = readme_block(TS_README, "## Quick start", "ts")
    (app / "quickstart.mjs").write_text(quick)
    out = run(["node", "quickstart.mjs"], cwd=app, env=env).stdout
    assert re.fullmatch(r"\{ messages: \[ 'hi' \] \} 1 [0-9a-f]{64}\n", out), out
    (app / "quickstart.mts").write_text(quick)
    tsc(app, ["quickstart.mts"], env)

    cjs = """\
const { Client, findBinary } = require("ckptd");
(async () => {
  const client = await Client.start({ db: "./cjs.db" });
  try {
    const saved = await client.save({ workflowId: "wf-cjs", step: 1, phase: "completed", state: { n: 42 } });
    const cp = await client.load({ workflowId: "wf-cjs" });
    console.log(JSON.stringify({ state: cp.state, same: cp.sha256 === saved.sha256, binary: findBinary(),
                                 version: client.serverInfo.serverVersion }));
  } finally {
    await client.close();
  }
})().catch((e) => { console.error(e); process.exit(1); });
"""
    (app / "roundtrip.cjs").write_text(cjs)
    got = json.loads(run(["node", "roundtrip.cjs"], cwd=app, env=env).stdout)
    assert got == {"state": {"n": 42}, "same": True, "version": VERSION,
                   "binary": str(app / "node_modules" / "@ckptd" / "linux-x64" / "bin" / "ckptd")}
    (app / "roundtrip.cts").write_text('import ckptd = require("ckptd");\nconst c: Promise<ckptd.Client> = ckptd.Client.start({ db: "x" });\nvoid c;\n')
    tsc(app, ["roundtrip.cts"], env)

    version = "ckptd %s (commit %s, " % (VERSION, git_commit())
    assert run(["npx", "--offline", "ckptd", "version"], cwd=app, env=env).stdout.startswith(version)
    ls = run(["npx", "--offline", "ckptd", "ls", "--db", "agent.db"], cwd=app, env=env).stdout
    assert re.search(r"^wf-1\s+1\s+step 0", ls, re.M), ls
    bad = run(["npx", "--offline", "ckptd", "no-such-command"], cwd=app, env=env, check=False)
    assert bad.returncode == 2 and "unknown command" in bad.stderr

    # without the platform package, the client says where it looked
    shutil.rmtree(app / "node_modules" / "@ckptd")
    p = run(["node", "quickstart.mjs"], cwd=app, env=env, check=False)
    assert p.returncode != 0 and "BinaryNotFoundError" in p.stderr
    assert "package @ckptd/linux-x64: @ckptd/linux-x64 is not installed" in p.stderr and "$CKPTD_PATH: not set" in p.stderr


def clean_copy(dest: Path) -> Path:
    """clients/ts as a fresh clone has it: the tracked files only (no node_modules, no dist)."""
    files = run(["git", "ls-files", "-co", "--exclude-standard", "clients/ts"], cwd=ROOT).stdout.split()
    for f in files:
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    return dest / "clients" / "ts"


def test_npm_install_of_a_fresh_checkout_folder_and_its_pack(tmp_path: Path) -> None:
    """#19 point 5: `npm install /path/to/clients/ts` and `npm install <its npm pack>` work without a
    manual build (the prepare script builds dist/; it fetches the pinned TypeScript if missing)."""
    need("node and npm", npm_ok(), "Node.js 20+ with npm")
    binary = ROOT / "bin" / "ckptd"
    need("bin/ckptd (go build -o bin/ckptd ./cmd/ckptd)", binary.exists(), "./scripts/test.sh builds it")
    env = dict(os.environ, CKPTD_PATH=str(binary), npm_config_update_notifier="false", npm_config_audit="false",
               npm_config_fund="false")
    src = clean_copy(tmp_path / "clone")
    assert not (src / "dist").exists() and not (src / "node_modules").exists()

    probe = """\
import { Client } from "ckptd";
import { createRequire } from "node:module";
const { Client: CjsClient } = createRequire(import.meta.url)("ckptd");
for (const C of [Client, CjsClient]) {
  const c = await C.start({ db: "./probe.db" });
  await c.save({ workflowId: "w", step: 0, state: { ok: true } });
  console.log(JSON.stringify((await c.load({ workflowId: "w" })).state));
  await c.close();
}
"""
    app = npm_project(tmp_path / "app-folder", env)
    run(["npm", "install", src], cwd=app, env=env)
    (app / "probe.mjs").write_text(probe)
    assert run(["node", "probe.mjs"], cwd=app, env=env).stdout == '{"ok":true}\n{"ok":true}\n'

    packdir = tmp_path / "pack"
    packdir.mkdir()
    fresh = clean_copy(tmp_path / "clone2")
    run(["npm", "pack", "--pack-destination", packdir, fresh], cwd=tmp_path, env=env)
    (tgz,) = packdir.glob("ckptd-*.tgz")
    app2 = npm_project(tmp_path / "app-pack", env)
    run(["npm", "install", "--offline", tgz], cwd=app2, env=env)
    (app2 / "probe.mjs").write_text(probe)
    assert run(["node", "probe.mjs"], cwd=app2, env=env).stdout == '{"ok":true}\n{"ok":true}\n'
