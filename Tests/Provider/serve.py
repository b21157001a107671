"""Runs the test provider: django-oauth-toolkit under waitress on one loopback
port (Tests/Provider/README.md).

    serve.py --dir DIR --port PORT [--host 127.0.0.1] [--access-ttl SECONDS] [--prepare]

On first run it makes DIR's RSA key (the ID token's RS256 key); every start
migrates DIR's SQLite database and seeds it, then prints `ready ISSUER` on
standard output once the port accepts connections. Port 0 picks a free port
(the ready line names it). --prepare stops after the seed (`scripts/provider
install` runs it once, so that the migrated empty database is ready). SIGTERM or SIGINT stops it; it starts no other
process.
"""

import argparse
import os
import signal
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def make_key(path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    temporary = path + ".tmp"
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
        out.write(pem)
    os.replace(temporary, path)


def migrate(directory):
    """Makes DIR's database from the migrated empty one kept beside the
    virtual environment's packages (made by the first start, in about 20 s on
    the project's machines), else migrates it; migrates it in any case (a
    no-op when it is current)."""
    import shutil

    from django.core.management import call_command
    from django.db import connection

    database = os.path.join(directory, "provider.sqlite3")
    template = os.path.join(sys.prefix, "browser-login-provider-template.sqlite3")
    fresh = not os.path.exists(database)
    if fresh and os.path.exists(template):
        shutil.copyfile(template, database)
        fresh = False
    call_command("migrate", verbosity=0, interactive=False)
    if fresh:
        connection.close()
        temporary = "%s.%d.tmp" % (template, os.getpid())
        try:
            shutil.copyfile(database, temporary)
            os.replace(temporary, template)
        except OSError:
            pass


class Stop(Exception):
    pass


def stop(signum, frame):
    raise Stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1", choices=["127.0.0.1", "::1"])
    parser.add_argument("--access-ttl", type=int, default=None)
    parser.add_argument("--prepare", action="store_true", help="migrate and seed, then exit (no server)")
    args = parser.parse_args()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    directory = os.path.abspath(args.dir)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    key_path = os.path.join(directory, "oidc-rsa.pem")
    if not os.path.exists(key_path):
        make_key(key_path)

    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((args.host, args.port))
    port = listener.getsockname()[1]
    host = "[%s]" % args.host if family == socket.AF_INET6 else args.host

    os.environ["BL_PROVIDER_DIR"] = directory
    os.environ["BL_PROVIDER_ORIGIN"] = "http://%s:%d" % (host, port)
    if args.access_ttl is not None:
        os.environ["BL_PROVIDER_ACCESS_TTL"] = str(args.access_ttl)
    os.environ["DJANGO_SETTINGS_MODULE"] = "blprovider.settings"
    sys.path.insert(0, HERE)

    import django
    from django.core.management import call_command

    django.setup()
    migrate(directory)
    call_command("seed")
    if args.prepare:
        listener.close()
        return 0

    from django.conf import settings
    from django.core.wsgi import get_wsgi_application
    from waitress import create_server

    server = create_server(get_wsgi_application(), sockets=[listener], threads=4, ident="test-provider")
    try:
        print("ready " + settings.ISSUER, flush=True)
        server.run()
    except Stop:
        pass
    finally:
        server.close()
        server.task_dispatcher.shutdown(timeout=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
