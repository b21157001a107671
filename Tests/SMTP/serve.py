"""The test SMTP server: aiosmtpd, a standard SMTP server this project did
not write, receiving the reference server's sign-in email in the tests.

usage: serve.py --dir DIR [--host 127.0.0.1] [--port 0]
                [--tls-cert PEM --tls-key PEM [--implicit-tls]] [--user NAME --password-env VAR]

Each message accepted is written to DIR as <n>.eml (the bytes received) and
<n>.json (the envelope: mail_from, rcpt_tos, whether the session was under
TLS and which user authenticated). With a certificate the server offers
STARTTLS and requires it before anything else (with --implicit-tls: TLS
from the first byte, as smtps:// on port 465); with a user it requires AUTH
(over TLS when TLS is on). Prints `ready PORT` once it accepts connections;
stops on SIGTERM.
"""
import argparse
import asyncio
import json
import os
import signal
import ssl
import sys

from aiosmtpd.smtp import SMTP, AuthResult


class Mailbox:
    def __init__(self, directory):
        self.directory = directory
        self.count = 0

    async def handle_DATA(self, server, session, envelope):
        self.count += 1
        base = os.path.join(self.directory, "%04d" % self.count)
        with open(base + ".eml.tmp", "wb") as f:
            f.write(envelope.original_content or envelope.content)
        with open(base + ".json.tmp", "w") as f:
            json.dump({
                "mail_from": envelope.mail_from,
                "rcpt_tos": envelope.rcpt_tos,
                "tls": session.ssl is not None or server.transport.get_extra_info("ssl_object") is not None,
                "user": session.auth_data.login.decode() if session.authenticated and session.auth_data else None,
            }, f)
        os.rename(base + ".json.tmp", base + ".json")
        os.rename(base + ".eml.tmp", base + ".eml")
        return "250 Message accepted for delivery"


def authenticator(user, password):
    def check(server, session, envelope, mechanism, auth_data):
        ok = (mechanism in ("PLAIN", "LOGIN") and auth_data.login == user.encode()
              and auth_data.password == password.encode())
        return AuthResult(success=ok, handled=False, auth_data=auth_data if ok else None)
    return check


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--implicit-tls", action="store_true")
    parser.add_argument("--user")
    parser.add_argument("--password-env")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)

    context = None
    if args.tls_cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.tls_cert, args.tls_key)
    implicit = context is not None and args.implicit_tls
    options = {"hostname": "localhost", "tls_context": None if implicit else context,
               "require_starttls": context is not None and not implicit}
    if args.user:
        password = os.environ.get(args.password_env or "", "")
        if not password:
            sys.exit("serve.py: --user needs --password-env naming a set variable")
        options.update(auth_required=True, auth_require_tls=context is not None and not implicit,
                       authenticator=authenticator(args.user, password))
    mailbox = Mailbox(args.dir)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(mailbox, loop=loop, **options), args.host, args.port,
                                      ssl=context if implicit else None)
    print("ready %d" % server.sockets[0].getsockname()[1], flush=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    server.close()


if __name__ == "__main__":
    asyncio.run(main())
