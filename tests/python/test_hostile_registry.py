"""A registry that answers with more than warden reads: a real registry refuses to store a
manifest past 4 MiB itself, so a hostile one, an HTTP server on 127.0.0.1 speaking the
distribution API's first words, serves them. A manifest that says it is too large, one that
streams without end (chunked, no length) and a flood at the API's root are each refused with
what was too large, and nothing is stored or written."""

from __future__ import annotations

import os
import subprocess

import pytest

from harness import QuietHandler, loopback_server, warden_bin

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
LIMIT = 4 << 20  # warden-oci's MANIFEST_LIMIT


class Hostile(QuietHandler):
    protocol_version = "HTTP/1.1"
    sent = 0

    def do_GET(self):
        if self.path == "/v2/":
            self.answer(b"{}", "application/json")
        elif self.path.endswith("/manifests/declared"):
            # Says 5 MiB; warden must not wait for (or hold) it.
            self.send_response(200)
            self.send_header("Content-Type", MANIFEST)
            self.send_header("Content-Length", str(5 << 20))
            self.end_headers()
            self.wfile.write(b"{" + b" " * 1024)
        elif self.path.endswith("/manifests/endless"):
            self.send_response(200)
            self.send_header("Content-Type", MANIFEST)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b" " * 65536
            try:
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    type(self).sent += len(chunk)
            except OSError:
                pass  # warden hung up, as it should
        else:
            self.answer(b"", status=404)


@pytest.fixture
def hostile():
    with loopback_server(Hostile) as port:
        yield f"127.0.0.1:{port}"


@pytest.mark.parametrize("tag", ["declared", "endless"])
def test_an_oversize_manifest_is_refused_and_nothing_kept(tmp_path, hostile, tag):
    toolbox, home = tmp_path / "policies", tmp_path / "home"
    toolbox.mkdir()
    env = {**os.environ, "WARDEN_TOOLBOX": str(toolbox), "WARDEN_HOME": str(home)}
    out = subprocess.run(
        [str(warden_bin()), "add", f"oci://{hostile}/tools/big:{tag}", "--allow-unsigned"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"is larger than {LIMIT} bytes, the most warden reads of it" in out.stderr, out.stderr
    assert f"tools/big:{tag}" in out.stderr, out.stderr
    assert list(toolbox.iterdir()) == []
    stored = home / "store"
    assert not stored.exists() or list(stored.iterdir()) == []
    if tag == "endless":
        # It stopped reading at the limit, not at the end of the registry's patience.
        assert Hostile.sent < LIMIT + (16 << 20), Hostile.sent
