#!/usr/bin/python3
"""A GLib client of org.browserlogin.Broker1 for the end-to-end tests
(Tests/EndToEndTests/DBusAPITests.swift), on the session bus of
DBUS_SESSION_BUS_ADDRESS.

It listens to the broker's SessionChanged and LoginChanged signals, calls
Subscribe first with --subscribe (--subscriptions times; with --clients,
only those clients'),
prints {"uniqueName": ITS_NAME} and "ready" once listening, then one JSON
line per signal received:
{"signal": NAME, "payload": {...}}. It exits 0 when a SessionChanged for
--until-client reaches --until-status, 3 when --timeout seconds pass first
(or, without --until-client, 0 after --timeout seconds), 4 when a call fails.

With --flood N CLIENT it instead makes N WaitSession calls for CLIENT at
once, from one connection, and prints {"replies": R, "errors": {NAME: COUNT}}
once all are answered; with --leave, it waits for WaitSession to start
(a GetSession answered after them) and leaves the bus without waiting.

With --probe SECONDS CLIENT it instead calls GetSession for CLIENT every 20 ms
for SECONDS, from one connection, by the well-known name, and prints
{"calls": N, "errors": {NAME: COUNT}} (the broker moving to a fresh bus
connection meanwhile must lose none).

With --match-rules UNIQUE_NAME it instead prints {"rules": [RULE, ...]}, the
match rules the bus keeps for that connection (org.freedesktop.DBus.Debug.Stats).

With --hostile-args CLIENT ROUNDS it instead makes ROUNDS rounds of oversized
calls (an 8 MiB client name, an options dictionary of 100,000 entries, a
16 MiB options value, a 1 MiB client name, 5,000 client ids) and prints {"errors": [{"name": NAME, "length": BYTES,
"quotes": LONGEST_RUN_OF_INPUT}, ...]} (docs/dbus.md, Limits).
"""
import argparse
import json
import re
import sys

import gi

gi.require_version("Gio", "2.0")
from gi.repository import Gio, GLib  # noqa: E402

NAME = "org.browserlogin.Broker1"
PATH = "/org/browserlogin/Broker1"


def hostile_args(bus, client, rounds):
    """Oversized arguments: each call must be refused without the broker quoting them."""
    name = "x" * (8 << 20)
    many = {"k%d" % i: GLib.Variant("s", "y") for i in range(100_000)}
    huge = {"body": GLib.Variant("s", "z" * (16 << 20))}
    calls = [
        ("GetSession", GLib.Variant("(s)", (name,))),
        ("WaitSession", GLib.Variant("(sa{sv})", (client, many))),
        ("Request", GLib.Variant("(sssa{sv})", (client, "POST", "/x", huge))),
        ("Start", GLib.Variant("(sa{sv})", (name[: 1 << 20], {}))),
        ("Subscribe", GLib.Variant("(a{sv})", ({"clients": GLib.Variant("as", ["c%d" % i for i in range(5000)])},))),
    ]
    errors = []
    for _ in range(rounds):
        for method, parameters in calls:
            try:
                bus.call_sync(NAME, PATH, NAME, method, parameters, None, Gio.DBusCallFlags.NONE, 60000, None)
                errors.append({"method": method, "name": "none"})
            except GLib.Error as error:
                message = Gio.DBusError.get_remote_error(error) and error.message or str(error)
                longest = max((len(run) for run in re.findall(r"x+|z+", message)), default=0)
                errors.append({"method": method, "name": Gio.DBusError.get_remote_error(error) or "",
                               "length": len(message.encode()), "quotes": longest})
    print(json.dumps({"errors": errors}), flush=True)
    return 0


def probe(bus, seconds, client):
    """GetSession every 20 ms for `seconds`: every call must be answered."""
    import time
    calls, errors = 0, {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            bus.call_sync(NAME, PATH, NAME, "GetSession", GLib.Variant("(s)", (client,)), None,
                          Gio.DBusCallFlags.NONE, 10000, None)
            calls += 1
        except GLib.Error as error:
            key = Gio.DBusError.get_remote_error(error) or str(error)
            errors[key] = errors.get(key, 0) + 1
        time.sleep(0.02)
    print(json.dumps({"calls": calls, "errors": errors}), flush=True)
    return 0


def match_rules(bus, name):
    """The match rules the bus keeps for `name` (a unique name), from its Stats interface."""
    reply = bus.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus.Debug.Stats",
                          "GetAllMatchRules", None, None, Gio.DBusCallFlags.NONE, 10000, None)
    print(json.dumps({"rules": reply.unpack()[0].get(name, [])}), flush=True)
    return 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--subscribe", action="store_true")
    parser.add_argument("--subscriptions", type=int, default=1, help="how many times to call Subscribe")
    parser.add_argument("--clients", default=None, help="comma-separated client ids for Subscribe")
    parser.add_argument("--until-client")
    parser.add_argument("--until-status", default="signedIn")
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--flood", nargs=2, metavar=("N", "CLIENT"))
    parser.add_argument("--wait-ms", type=int, default=3000, help="WaitSession's timeoutMs with --flood")
    parser.add_argument("--leave", action="store_true")
    parser.add_argument("--hostile-args", nargs=2, metavar=("CLIENT", "ROUNDS"))
    parser.add_argument("--probe", nargs=2, metavar=("SECONDS", "CLIENT"))
    parser.add_argument("--match-rules", metavar="UNIQUE_NAME")
    args = parser.parse_args()

    bus = Gio.bus_get_sync(Gio.BusType.SESSION, None)
    loop = GLib.MainLoop()
    if args.hostile_args:
        return hostile_args(bus, args.hostile_args[0], int(args.hostile_args[1]))
    if args.match_rules:
        return match_rules(bus, args.match_rules)
    if args.probe:
        return probe(bus, float(args.probe[0]), args.probe[1])
    if args.flood:
        return flood(bus, loop, int(args.flood[0]), args.flood[1], args.wait_ms, args.leave)
    outcome = {"status": 0 if args.until_client is None else 3}

    def on_signal(_connection, _sender, _path, _interface, signal, parameters):
        payload = parameters.unpack()[0]
        print(json.dumps({"signal": signal, "payload": payload}, sort_keys=True), flush=True)
        if (signal == "SessionChanged" and payload.get("client") == args.until_client
                and payload.get("status") == args.until_status):
            outcome["status"] = 0
            loop.quit()

    for signal in ("SessionChanged", "LoginChanged"):
        bus.signal_subscribe(NAME, NAME, signal, PATH, None, Gio.DBusSignalFlags.NONE, on_signal)

    if args.subscribe:
        options = {}
        if args.clients is not None:
            options["clients"] = GLib.Variant("as", [c for c in args.clients.split(",") if c])
        for _ in range(args.subscriptions):
            try:
                reply = bus.call_sync(NAME, PATH, NAME, "Subscribe", GLib.Variant("(a{sv})", (options,)),
                                      GLib.VariantType("(s)"), Gio.DBusCallFlags.NONE, 10000, None)
            except GLib.Error as error:
                print(json.dumps({"error": Gio.DBusError.get_remote_error(error) or str(error)}), flush=True)
                return 4
            print(json.dumps({"subscription": reply.unpack()[0]}), flush=True)

    # A round trip first, so the match rules are in place before "ready".
    bus.call_sync("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetId",
                  None, None, Gio.DBusCallFlags.NONE, 10000, None)
    print(json.dumps({"uniqueName": bus.get_unique_name()}), flush=True)
    print("ready", flush=True)
    GLib.timeout_add(int(args.timeout * 1000), loop.quit)
    loop.run()
    return outcome["status"]


def flood(bus, loop, count, client, wait_ms, leave):
    tally = {"replies": 0, "errors": {}, "left": count}

    def done(connection, result):
        try:
            connection.call_finish(result)
            tally["replies"] += 1
        except GLib.Error as error:
            name = Gio.DBusError.get_remote_error(error) or "local"
            tally["errors"][name] = tally["errors"].get(name, 0) + 1
        tally["left"] -= 1
        if tally["left"] == 0:
            loop.quit()

    options = {"timeoutMs": GLib.Variant("x", wait_ms)}
    for _ in range(count):
        bus.call(NAME, PATH, NAME, "WaitSession", GLib.Variant("(sa{sv})", (client, options)),
                 GLib.VariantType("(a{sv})"), Gio.DBusCallFlags.NONE, wait_ms + 20000, None, done)
    if leave:
        # Answered after the calls before it have reached the broker's handler.
        bus.call_sync(NAME, PATH, NAME, "GetSession", GLib.Variant("(s)", (client,)), GLib.VariantType("(a{sv})"),
                      Gio.DBusCallFlags.NONE, 10000, None)
        print("left", flush=True)
        return 0
    loop.run()
    print(json.dumps({"replies": tally["replies"], "errors": tally["errors"]}, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
