"""A local Redfish service for tests: a DMTF-mockup-shaped tree served on 127.0.0.1 and a free port, the power
readings set by the test, with basic and session authentication.

    bmc = start_redfish(schema="environment", counter="EnergyJoules")   # or "supplies", "power" (deprecated)
    bmc.watts = 412.0; bmc.joules = 1.5e6                              # what the next GET answers
    reader = make_reader(base_url=bmc.url, username=bmc.username, password_file=bmc.password_file(tmp_path))
    bmc.expire_sessions()      # every token now gets 401: the client must log in again
    bmc.stop_answering()       # accept connections and never answer (a hung BMC); bmc.answer() undoes it
    bmc.fail_with = (503, b"busy")   # every authorised GET answers this instead, until set to None
    bmc.close()

The tree (`/redfish/v1`, `Chassis` with a backplane without power data first, then `Chassis/1` with the
schema's resources, `SessionService/Sessions`) follows the DMTF's public mockups (DSP2043); `python -m
tests.redfish_mockup --schema power` serves one by hand (the daemon's end-to-end tests start it this way).
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = "/redfish/v1"
CHASSIS = f"{ROOT}/Chassis/1"
SCHEMAS = ("environment", "supplies", "power")


class RedfishMockup:
    """The service; `watts`, `joules` (a counter, when `counter` names one) and `sensing_interval` are live."""

    def __init__(
        self,
        schema: str = "environment",
        counter: str | None = None,
        username: str = "admin",
        password: str = "s3cret",
        port: int = 0,
    ) -> None:
        if schema not in SCHEMAS:
            raise ValueError(f"schema {schema!r}: one of {SCHEMAS}")
        self.schema, self.counter = schema, counter
        self.username, self.password = username, password
        self.watts, self.joules = 300.0, 0.0
        self.sensing_interval: str | None = "PT1S"
        self.fail_with: tuple[int, bytes] | None = None  # (status, body) every authorised GET answers instead
        self.password_change_required = False  # a login succeeds but demands a new password first
        self.tokens: dict[str, str] = {}  # token -> session path
        self.logins = self.logouts = 0
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self._ids = itertools.count(1)
        self._answering = threading.Event()
        self._answering.set()
        self._closed = False
        self.server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def password_file(self, directory: Path) -> str:
        path = Path(directory) / "bmc-password"
        path.write_text(self.password + "\n")
        path.chmod(0o600)
        return str(path)

    def expire_sessions(self) -> None:
        self.tokens.clear()

    def stop_answering(self) -> None:
        self._answering.clear()

    def answer(self) -> None:
        self._answering.set()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._answering.set()
            self.server.shutdown()
            self.server.server_close()

    # -- the tree --------------------------------------------------------------------------------------------
    def resources(self) -> dict[str, Callable[[], dict[str, Any]]]:
        link = lambda path: {"@odata.id": path}
        chassis: dict[str, Any] = {"@odata.id": CHASSIS, "Id": "1", "Name": "Computer System Chassis"}
        tree: dict[str, Callable[[], dict[str, Any]]] = {
            ROOT: lambda: {
                "@odata.id": ROOT,
                "Id": "RootService",
                "RedfishVersion": "1.15.0",
                "Chassis": link(f"{ROOT}/Chassis"),
                "SessionService": link(f"{ROOT}/SessionService"),
                "Links": {"Sessions": link(f"{ROOT}/SessionService/Sessions")},
            },
            f"{ROOT}/Chassis": lambda: {
                "@odata.id": f"{ROOT}/Chassis",
                "Members@odata.count": 2,
                "Members": [link(f"{ROOT}/Chassis/Backplane"), link(CHASSIS)],
            },
            f"{ROOT}/Chassis/Backplane": lambda: {"@odata.id": f"{ROOT}/Chassis/Backplane", "Id": "Backplane"},
            f"{ROOT}/SessionService/Sessions": lambda: {
                "Members": [link(p) for p in self.tokens.values()],
            },
        }
        if self.schema == "environment":
            chassis["EnvironmentMetrics"] = link(f"{CHASSIS}/EnvironmentMetrics")
            chassis["PowerSubsystem"] = link(f"{CHASSIS}/PowerSubsystem")  # present, but without supplies' metrics
            tree[f"{CHASSIS}/EnvironmentMetrics"] = self._environment
            tree[f"{CHASSIS}/Sensors/PowerWatts"] = lambda: {
                "Id": "PowerWatts",
                "ReadingType": "Power",
                "ReadingUnits": "W",
                "Reading": self.watts,
                **({"SensingInterval": self.sensing_interval} if self.sensing_interval else {}),
            }
            tree[f"{CHASSIS}/PowerSubsystem"] = lambda: {"Id": "PowerSubsystem", "CapacityWatts": 1600}
        elif self.schema == "supplies":
            chassis["PowerSubsystem"] = link(f"{CHASSIS}/PowerSubsystem")
            tree[f"{CHASSIS}/PowerSubsystem"] = lambda: {
                "PowerSupplies": link(f"{CHASSIS}/PowerSubsystem/PowerSupplies")
            }
            supplies = f"{CHASSIS}/PowerSubsystem/PowerSupplies"
            tree[supplies] = lambda: {"Members": [link(f"{supplies}/0"), link(f"{supplies}/1")]}
            for n in (0, 1):
                tree[f"{supplies}/{n}"] = lambda n=n: {"Id": str(n), "Metrics": link(f"{supplies}/{n}/Metrics")}
                tree[f"{supplies}/{n}/Metrics"] = self._supply_metrics
        else:
            chassis["Power"] = link(f"{CHASSIS}/Power")
            tree[f"{CHASSIS}/Power"] = lambda: {
                "@odata.type": "#Power.v1_7_1.Power",
                "PowerControl": [{"MemberId": "0", "PowerConsumedWatts": self.watts, "PowerCapacityWatts": 1600}],
            }
        tree[CHASSIS] = lambda: chassis
        return tree

    def _environment(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
            "PowerWatts": {"Reading": self.watts, "DataSourceUri": f"{CHASSIS}/Sensors/PowerWatts"},
        }
        if self.counter == "EnergyJoules":
            doc["EnergyJoules"] = {"Reading": self.joules}
        elif self.counter == "EnergykWh":
            doc["EnergykWh"] = {"Reading": self.joules / 3.6e6}
        return doc

    def _supply_metrics(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"InputPowerWatts": {"Reading": self.watts / 2}}  # two supplies share the load
        if self.counter == "EnergykWh":
            doc["EnergykWh"] = {"Reading": self.joules / 2 / 3.6e6}
        return doc

    # -- authentication --------------------------------------------------------------------------------------
    def authorised(self, headers: Any) -> bool:
        token = headers.get("X-Auth-Token")
        if token is not None:
            return token in self.tokens
        basic = headers.get("Authorization", "")
        expected = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return basic == f"Basic {expected}"

    def login(self, body: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
        try:
            creds = json.loads(body)
        except ValueError:
            return 400, {}, _error("Base.1.0.MalformedJSON")
        if creds.get("UserName") != self.username or creds.get("Password") != self.password:
            return 401, {}, _error("Base.1.0.NoValidSession")
        self.logins += 1
        n = next(self._ids)
        token, path = f"token-{n}", f"{ROOT}/SessionService/Sessions/{n}"
        self.tokens[token] = path
        doc: dict[str, Any] = {"@odata.id": path, "Id": str(n), "UserName": self.username}
        if self.password_change_required:
            doc["@Message.ExtendedInfo"] = [
                {"MessageId": "Base.1.8.PasswordChangeRequired", "MessageArgs": [f"{ROOT}/AccountService/Accounts/1"]}
            ]
        return 201, {"X-Auth-Token": token, "Location": path}, doc


def _error(message_id: str) -> dict[str, Any]:
    return {"error": {"code": message_id, "message": message_id, "@Message.ExtendedInfo": [{"MessageId": message_id}]}}


def _handler(bmc: RedfishMockup) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _path(self) -> str:
            return self.path.split("?", 1)[0].rstrip("/") or "/"

        def _wait(self) -> bool:
            bmc.requests.append((self.command, self._path()))
            bmc._answering.wait()  # a hung BMC: the connection is open, no answer comes
            return not bmc._closed

        def _send(self, status: int, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> None:
            self._send_raw(status, json.dumps(body).encode() if body is not None else b"", headers)

        def _send_raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("OData-Version", "4.0")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if not self._wait():
                return
            path = self._path()
            tree = bmc.resources()
            if path != ROOT and not bmc.authorised(self.headers):
                self._send(401, _error("Base.1.0.NoValidSession"))
            elif path != ROOT and bmc.fail_with is not None:
                self._send_raw(*bmc.fail_with)
            elif path in tree:
                self._send(200, tree[path]())
            else:
                self._send(404, _error("Base.1.0.ResourceMissingAtURI"))

        def do_POST(self) -> None:
            if not self._wait():
                return
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self._path() != f"{ROOT}/SessionService/Sessions":
                self._send(405, _error("Base.1.0.ActionNotSupported"))
                return
            status, headers, doc = bmc.login(body)
            self._send(status, doc, headers)

        def do_DELETE(self) -> None:
            if not self._wait():
                return
            path = self._path()
            token = next((t for t, p in bmc.tokens.items() if p == path), None)
            if token is None or self.headers.get("X-Auth-Token") != token:
                self._send(401 if token is None else 403, _error("Base.1.0.NoValidSession"))
                return
            del bmc.tokens[token]
            bmc.logouts += 1
            self._send(204)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def start_redfish(schema: str = "environment", counter: str | None = None, port: int = 0) -> RedfishMockup:
    """A mockup BMC serving on 127.0.0.1 and `port` (0: a free one; its `url` says which)."""
    return RedfishMockup(schema=schema, counter=counter, port=port)


def main() -> None:
    """Serve a mockup until killed, printing its URL (for tests that need it in another process)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schema", choices=SCHEMAS, default="environment")
    parser.add_argument("--counter", choices=("EnergyJoules", "EnergykWh"), default=None)
    parser.add_argument("--watts", type=float, default=300.0)
    parser.add_argument("--password-file", required=True, help="written with the mockup's password")
    parser.add_argument("--port", type=int, default=0, help="on 127.0.0.1 (default: a free one)")
    args = parser.parse_args()
    bmc = RedfishMockup(schema=args.schema, counter=args.counter, port=args.port)
    bmc.watts = args.watts
    Path(args.password_file).write_text(bmc.password + "\n")
    print(json.dumps({"url": bmc.url, "username": bmc.username}), flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
