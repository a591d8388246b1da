"""``specops lab``: the rejection-sampling lab as a page, served on 127.0.0.1 only.

One implementation of the mathematics: the page draws what ``GET /api/audit`` returns, which
is :func:`specops.audit.run_audit`'s report (the object ``specops audit --json`` prints) for
the knobs in the query string; the page's script only lays it out.  To answer while a slider
moves, the page's audit is the fast variant of the same functions: no 1,296-setting grid,
one backend (:func:`page_backend`: the C++ one where it is built, never Triton's CPU
interpreter), and the exact-law enumerations cached per model.  ``specops audit`` runs the
grid and every backend.

Routes (GET only; anything else is 404 or 405, so only the package's own files are served):

* ``/`` (``/index.html``), ``/lab.js``, ``/lab.css``: the page, from ``specops/lab_static``
  (package data; the page loads nothing from the network);
* ``/api/knobs``: the knobs' ranges, defaults and the starting values given to ``specops lab``;
* ``/api/audit?certainty=..&match=..&gamma=..&cost=..&length=..&seed=..``: the report, or
  status 400 with ``{"error": message, "knob": name}``, the message being the one the CLI
  prints for the same value (``lab.sanitize_knobs``);
* ``/api/audit/quick?...``: the same without the exact laws (their enumeration is the slow
  part, ~0.3-1 s for a new model): the page shows it first, then the full report.

The page's trace is at most ``PAGE_MAX_LENGTH`` tokens (``specops audit --length`` runs
longer ones), and an audit request that finds another running for more than
``BUSY_WAIT_S`` seconds is answered 503 (busy) rather than queued behind it.

Requests must name the server by its loopback address (``Host: 127.0.0.1:PORT`` or
``localhost:PORT``): a page elsewhere cannot reach it through DNS rebinding.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import webbrowser
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Callable, Optional
from urllib.parse import parse_qs, urlencode, urlsplit

from specops import lab

HOST = "127.0.0.1"
PAGE_MAX_LENGTH = 20_000        # the page's longest trace (a few seconds of audit)
BUSY_WAIT_S = 5.0               # how long an audit request waits for the running one
STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
          "/index.html": ("index.html", "text/html; charset=utf-8"),
          "/lab.js": ("lab.js", "text/javascript; charset=utf-8"),
          "/lab.css": ("lab.css", "text/css; charset=utf-8")}
HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
           "Content-Security-Policy": "default-src 'self'; img-src 'self' data:",
           "Referrer-Policy": "no-referrer"}


def page_backend() -> str:
    """The backend the page's audit runs on: the best available one that answers fast."""
    import torch
    names = lab.available_backends()
    if "cpu" in names:
        return "cpu"
    if "triton" in names and torch.cuda.is_available():
        return "triton"
    return "reference"


def knob_table(start: lab.Knobs) -> list:
    """The knobs as the page builds its controls: ranges and defaults from ``lab``."""
    out = []
    for name, (kind, lo, hi, what) in lab.KNOB_RANGES.items():
        rng = f"an integer in [{lo}, {hi}]" if kind == "int" else f"a number in [{lo:g}, {hi:g}]"
        out.append({"name": name, "kind": kind, "lo": str(lo), "hi": str(hi), "what": what,
                    "range": rng, "default": str(getattr(lab.DEFAULT_KNOBS, name)),
                    "initial": str(getattr(start, name))})
    return out


class Lab:
    """The page's audit: one at a time (the machine's cores are shared), laws cached."""

    def __init__(self, start: lab.Knobs = lab.DEFAULT_KNOBS):
        self.start = start
        self.backend = page_backend()
        self._lock = threading.Lock()
        self._laws: dict = {}

    def audit(self, params: dict, laws: bool = True) -> tuple:
        """(status, JSON-ready body) for the query's knob values (strings); ``laws=False``:
        without the exact laws (``run_audit(laws=False)``), the page's first answer."""
        for name in params:
            if name not in lab.KNOB_RANGES:
                return 400, {"error": f"unknown knob {name!r}; the knobs are "
                                      f"{', '.join(lab.KNOB_RANGES)}", "knob": name}
        for name in lab.KNOB_RANGES:        # the CLI's order, so the same knob is named
            if name in params:
                try:
                    lab.sanitize_knobs(**{name: params[name]})
                except lab.KnobError as exc:
                    return 400, {"error": str(exc), "knob": name}
        knobs = lab.sanitize_knobs(**params)
        if knobs.length > PAGE_MAX_LENGTH:
            return 400, {"error": f"knob 'length' (tokens to emit) is at most "
                                  f"{PAGE_MAX_LENGTH} on the page; `specops audit --length "
                                  f"{knobs.length}` runs it in the terminal", "knob": "length"}
        from specops import audit
        if not self._lock.acquire(timeout=BUSY_WAIT_S):
            return 503, {"error": "busy: another audit is running; try again"}
        try:
            report = audit.run_audit(knobs, backend=self.backend, grid=False,
                                     only=[self.backend], law_cache=self._laws, laws=laws)
        finally:
            self._lock.release()
        report["page"] = {"variant": f"no grid; backend {self.backend} only; exact laws "
                                     "cached per model",
                          "full": "specops audit runs the grid and every backend"}
        return 200, report


class Handler(BaseHTTPRequestHandler):
    server_version = "specops-lab"
    lab: Lab = None                 # set by make_server

    def log_message(self, fmt, *args):      # quiet: the terminal shows the URL, not a log
        pass

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in HEADERS.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj, allow_nan=False).encode(), "application/json")

    def _host_ok(self) -> bool:
        port = self.server.server_address[1]
        return self.headers.get("Host", "") in (f"{HOST}:{port}", f"localhost:{port}")

    def do_GET(self):
        if not self._host_ok():
            return self._json(403, {"error": "the lab answers only at its loopback address"})
        url = urlsplit(self.path)
        if url.path in STATIC:
            name, ctype = STATIC[url.path]
            body = resources.files("specops").joinpath("lab_static").joinpath(name)
            return self._send(200, body.read_bytes(), ctype)
        if url.path == "/api/knobs":
            return self._json(200, {"knobs": knob_table(self.lab.start),
                                    "tokens": list(lab.TOKENS), "backend": self.lab.backend})
        if url.path in ("/api/audit", "/api/audit/quick"):
            query = parse_qs(url.query, keep_blank_values=True)
            params = {k: v[-1] for k, v in query.items()}
            try:
                status, body = self.lab.audit(params, laws=url.path == "/api/audit")
            except Exception as exc:        # a failure of the audit itself, not of the knobs
                status, body = 500, {"error": f"{type(exc).__name__}: {exc}"}
            return self._json(status, body)
        return self._json(404, {"error": f"not found: {url.path}"})

    do_HEAD = do_GET

    def _refuse(self):
        self._json(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "the lab only answers GET"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse


class LabServer(ThreadingHTTPServer):
    """A thread per request, a listen backlog for a burst of page requests (the default 5
    reset clients while an audit computed), and quiet about a client that went away."""
    request_queue_size = 128
    daemon_threads = True

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return                          # a closed tab or a dropped connection
        super().handle_error(request, client_address)


def make_server(port: int = 0, start: lab.Knobs = lab.DEFAULT_KNOBS) -> ThreadingHTTPServer:
    """A server on 127.0.0.1:`port` (0: a free one; see ``server.server_port``)."""
    handler = type("LabHandler", (Handler,), {"lab": Lab(start)})
    return LabServer((HOST, port), handler)


def page_url(server, start: lab.Knobs = lab.DEFAULT_KNOBS) -> str:
    changed = {k: v for k, v in start.as_dict().items()
               if v != getattr(lab.DEFAULT_KNOBS, k)}
    return (f"http://{HOST}:{server.server_port}/"
            + ("?" + urlencode(changed) if changed else ""))


def _can_open_browser() -> bool:
    """A graphical browser is likely: not on a Linux machine without a display, where
    ``webbrowser`` would start a text browser in this terminal."""
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def serve(start: lab.Knobs = lab.DEFAULT_KNOBS, port: int = 0, open_browser: bool = True,
          out: Callable[[str], None] = print, ready: Optional[Callable] = None) -> int:
    """Run the lab's server until Ctrl-C; returns the exit status."""
    try:
        server = make_server(port, start)
    except OSError as exc:
        print(f"specops lab: error: cannot listen on {HOST}:{port}: {exc}", file=sys.stderr)
        return 2
    url = page_url(server, start)
    try:                                    # Ctrl-C at any point: a quiet exit, status 0
        server.RequestHandlerClass.lab.audit(
            {k: str(v) for k, v in start.as_dict().items()})   # warm up: imports, first laws
        out(f"specops lab: the rejection-sampling lab at {url}  (127.0.0.1 only; Ctrl-C "
            "stops)")
        if open_browser:
            if _can_open_browser():
                webbrowser.open(url)
            else:
                out("specops lab: no display here: open the address above in a browser")
        if ready is not None:
            ready(server)
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
