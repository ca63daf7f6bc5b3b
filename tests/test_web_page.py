"""The latent_ddpm page (examples/latent_ddpm/web) in a real browser: headless Chromium (Debian's package; .ci/run
installs it) loads it from a local server, samples every shipped checkpoint from the QwenGPUs' noise in JavaScript
(and in WebGPU where the browser offers a device), and the integers must equal the numpy replay's; the page's own
replay check must pass; a screenshot is saved.
"""
import functools
import html
import http.server
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from examples.points_ddpm import fixed, split

WEB = Path(__file__).resolve().parents[1] / "examples/latent_ddpm/web"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium (Debian package chromium; .ci/run installs it)")
# as the machine's notes say: no sandbox as root, and no background networking (the network is closed)
FLAGS = ["--headless=new", "--no-sandbox", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
WEBGPU = ["--enable-unsafe-webgpu", "--enable-features=Vulkan", "--use-vulkan=swiftshader",
          "--use-webgpu-adapter=swiftshader", "--use-angle=swiftshader"]


@pytest.fixture(scope="module")
def server():
    handler = functools.partial(_Quiet, directory=str(WEB))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    thread.join(timeout=10)


RESULTS: "queue.Queue[str]" = queue.Queue()       # what pages opened with ?post=1 send back


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        """The page's test result (?post=1): kept for the test that waits for it in real time."""
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        RESULTS.put(body)
        self.send_response(204)
        self.end_headers()


def _end_group(browser: subprocess.Popen) -> None:
    """End the browser and every process it started (GPU, renderer, crash handler: its process group), and wait
    until none is left: one still writing into the profile made removing the profile fail once."""
    for sig, grace in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(browser.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            browser.poll()                  # reap the leader, so the group can empty
            try:
                os.killpg(browser.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
    browser.wait()


def _browser(profile: str, args, **streams) -> subprocess.Popen:
    """Chromium on a fresh profile in a process group of its own (so _end_group can end all of it), with its
    temporary files (the singleton socket's directory, which an ended browser leaves) inside the profile, removed
    with it."""
    return subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], stderr=subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ, "TMPDIR": profile}, **streams)


def _chromium(args, timeout=240) -> str:
    with tempfile.TemporaryDirectory() as profile:
        browser = _browser(profile, args, stdout=subprocess.PIPE, text=True)
        try:
            out, _ = browser.communicate(timeout=timeout)
        finally:
            _end_group(browser)
    return out


def _page_report(url: str, extra=()) -> tuple[dict, str]:
    dom = _chromium([*extra, "--virtual-time-budget=60000", "--dump-dom", url])
    m = re.search(r'<pre id="test-result"[^>]*data-done="1"[^>]*>(.*?)</pre>', dom, re.S)
    assert m, f"the page wrote no test result; DOM tail: {dom[-600:]}"
    return json.loads(html.unescape(m.group(1))), dom


def _page_report_live(url: str, extra=(), timeout=240) -> dict:
    """Open the page with ?post=1 in real time (no virtual time: WebGPU answers in real time, and the page's
    deadlines are timers) and wait for the result it posts back; the browser is closed afterwards."""
    while not RESULTS.empty():
        RESULTS.get_nowait()
    with tempfile.TemporaryDirectory() as profile:
        browser = _browser(profile, [*extra, url], stdout=subprocess.DEVNULL)
        try:
            return json.loads(RESULTS.get(timeout=timeout))
        except queue.Empty:
            pytest.fail(f"the page at {url} posted no result within {timeout} s")
        finally:
            _end_group(browser)


@pytest.fixture(scope="module")
def model():
    return json.loads((WEB / "model.json").read_text())


def _replay(model, ck):
    sch = fixed.schedule(model["T"])
    assert sch.F.tolist() == model["F"] and sch.C1.tolist() == model["C1"] and sch.C2.tolist() == model["C2"]
    xT = np.array(model["replay"]["xT"], np.int64)
    return split.sample(np.array(ck["w1"], np.int64), np.array(ck["w2"], np.int64), sch, xT)


def test_shipped_integers_are_the_replays(model):
    """What the page compares against (the QwenGPUs' x_0) is what the numpy replay makes of their x_T."""
    final = model["checkpoints"][-1]
    np.testing.assert_array_equal(_replay(model, final), np.array(model["replay"]["x0"]))
    assert model["checkpoints"][0]["step"] == 0 and len(model["checkpoints"]) >= 2


def test_javascript_path_equals_the_replay(server, model):
    report, dom = _page_report(f"{server}/index.html?test=1&webgpu=0", ["--disable-gpu"])
    assert "error" not in report, report
    assert report["replay_ok"] is True and 'class="pass"' in dom and "Replay check passed" in dom
    assert [c["step"] for c in report["checkpoints"]] == [c["step"] for c in model["checkpoints"]]
    for got, ck in zip(report["checkpoints"], model["checkpoints"]):
        np.testing.assert_array_equal(np.array(got["js"]), _replay(model, ck), err_msg=f"step {ck['step']}")


def test_webgpu_path_equals_the_replay(server, model):
    report = _page_report_live(f"{server}/index.html?test=1&post=1&deadline=120000", WEBGPU)
    assert "error" not in report, report
    if not report["webgpu"]:
        pytest.skip(f"this headless Chromium offers no WebGPU device ({report['webgpu_absent']}); the page fell back "
                    "to JavaScript and said so")
    for got, ck in zip(report["checkpoints"], model["checkpoints"]):
        np.testing.assert_array_equal(np.array(got["webgpu"]), _replay(model, ck), err_msg=f"step {ck['step']}")


def test_a_wrong_integer_fails_the_page_check(tmp_path, model):
    """The page's check can fail: the same page with one of the QwenGPUs' integers changed says FAILED."""
    for f in WEB.iterdir():
        if f.is_file():
            shutil.copy(f, tmp_path / f.name)
    bad = json.loads((tmp_path / "model.json").read_text())
    bad["replay"]["x0"][0][3] += 1
    (tmp_path / "model.json").write_text(json.dumps(bad))
    handler = functools.partial(_Quiet, directory=str(tmp_path))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        report, dom = _page_report(f"http://127.0.0.1:{httpd.server_address[1]}/index.html?test=1&webgpu=0",
                                   ["--disable-gpu"])
    finally:
        httpd.shutdown()
        thread.join(timeout=10)
    assert report["replay_ok"] is False and "Replay check FAILED" in dom and 'class="fail"' in dom


def test_screenshot(server, tmp_path):
    shot = tmp_path / "page.png"
    _chromium(["--disable-gpu", "--window-size=900,820", "--virtual-time-budget=60000", f"--screenshot={shot}",
               f"{server}/index.html?webgpu=0"])
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000      # the drawn digits, not a blank page
