"""A scripted browser for the test provider (Tests/Provider/README.md):
plays the user on django-oauth-toolkit's real pages with the standard
library only (urllib, http.cookiejar, html.parser).

    browser.py authorize URL [--user alice] [--deny] [--deliver]
        Opens the authorize URL, signs in on Django's login form (CSRF token
        included), approves (or denies) on DOT's consent form, and stops at
        the redirect to the app: prints that Location on standard output.
        With --deliver, an http loopback Location is also fetched and the
        answer's status line printed on standard error.

    browser.py device VERIFICATION_URI USER_CODE [--user alice] [--deny]
        Signs in, enters the user code and approves (or denies) the device
        on DOT's device pages; prints the final page's heading
        ("Device Authorized" or "Device Denied").

The password of user NAME is NAME-password (the seed). Exit status 0 on
success, 1 with a message on standard error otherwise (no URL, code or
token in it).
"""

import argparse
import http.client
import http.cookiejar
import sys
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser

MAX_STEPS = 12


class Failure(Exception):
    pass


class Forms(HTMLParser):
    """The forms of a page: action, method, fields (name -> value, from inputs
    that are not submit buttons) and submit buttons [(name, value)]; and the
    text of the first h1/h2."""

    def __init__(self):
        super().__init__()
        self.forms = []
        self.heading = None
        self._in_heading = False

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        if tag == "form":
            self.forms.append({"action": a.get("action", ""), "method": a.get("method", "get").lower(),
                               "id": a.get("id", ""), "fields": {}, "submits": []})
        elif tag in ("input", "button") and self.forms:
            kind = a.get("type", "submit" if tag == "button" else "text").lower()
            if kind == "submit":
                self.forms[-1]["submits"].append((a.get("name"), a.get("value", "")))
            elif a.get("name"):
                self.forms[-1]["fields"][a["name"]] = a.get("value", "")
        elif tag in ("h1", "h2") and self.heading is None:
            self._in_heading = True
            self.heading = ""

    def handle_endtag(self, tag):
        if tag in ("h1", "h2"):
            self._in_heading = False

    def handle_data(self, data):
        if self._in_heading:
            self.heading += data


def parse(body):
    forms = Forms()
    forms.feed(body)
    return forms


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class Browser:
    def __init__(self):
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), NoRedirect())

    def request(self, url, data=None, referer=None):
        """One request, no redirect followed: (status, Location or None, body)."""
        encoded = urllib.parse.urlencode(data).encode() if data is not None else None
        req = urllib.request.Request(url, data=encoded)
        if referer:
            req.add_header("Referer", referer)
        try:
            with self.opener.open(req, timeout=30) as response:
                return response.status, response.headers.get("Location"), response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            body = error.read().decode("utf-8", "replace")
            return error.code, error.headers.get("Location"), body
        except (urllib.error.URLError, OSError) as error:
            raise Failure("cannot reach %s: %s" % (urllib.parse.urlsplit(url).netloc, error))


def origin(url):
    parts = urllib.parse.urlsplit(url)
    return (parts.scheme, parts.netloc)


def log_in(browser, url, body, user):
    """Submits Django's login form found in `body` (the page at `url`)."""
    forms = [f for f in parse(body).forms if "password" in f["fields"]]
    if not forms:
        raise Failure("no login form on the sign-in page")
    form = forms[0]
    fields = dict(form["fields"], username=user, password=user + "-password")
    status, location, body = browser.request(urllib.parse.urljoin(url, form["action"] or url), fields, referer=url)
    if status != 302 or not location:
        raise Failure("the sign-in was refused (HTTP %d)" % status)
    return urllib.parse.urljoin(url, location)


def page_error(body):
    heading = parse(body).heading
    return (" (%s)" % heading.strip()) if heading else ""


def authorize(url, user, deny, deliver):
    browser = Browser()
    provider = origin(url)
    current = url
    for _ in range(MAX_STEPS):
        status, location, body = browser.request(current)
        if status in (301, 302, 303, 307, 308) and location:
            target = urllib.parse.urljoin(current, location)
            if origin(target) != provider:
                return finish(browser, target, deliver)
            current = target
            continue
        if status != 200:
            raise Failure("the provider answered HTTP %d%s" % (status, page_error(body)))
        forms = parse(body).forms
        if any("password" in f["fields"] for f in forms):
            current = log_in(browser, current, body, user)
            continue
        consent = [f for f in forms if f["id"] == "authorizationForm"]
        if not consent:
            raise Failure("neither a sign-in nor a consent form%s" % page_error(body))
        fields = dict(consent[0]["fields"])
        if not deny:
            fields["allow"] = next((v for n, v in consent[0]["submits"] if n == "allow"), "Authorize")
        action = urllib.parse.urljoin(current, consent[0]["action"] or current)
        status, location, body = browser.request(action, fields, referer=current)
        if status not in (301, 302, 303, 307, 308) or not location:
            raise Failure("the consent form answered HTTP %d%s" % (status, page_error(body)))
        target = urllib.parse.urljoin(action, location)
        if origin(target) != provider:
            return finish(browser, target, deliver)
        current = target
    raise Failure("too many steps before the redirect to the app")


def finish(browser, target, deliver):
    print(target, flush=True)
    parts = urllib.parse.urlsplit(target)
    if deliver and parts.scheme == "http" and parts.hostname in ("127.0.0.1", "::1"):
        connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=30)
        try:
            connection.request("GET", urllib.parse.urlunsplit(("", "", parts.path, parts.query, "")))
            response = connection.getresponse()
            response.read()
            print("HTTP/1.1 %d %s" % (response.status, response.reason), file=sys.stderr, flush=True)
        except OSError as error:
            raise Failure("cannot deliver the redirect to the loopback listener: %s" % error)
        finally:
            connection.close()
    return 0


def device(verification_uri, user_code, user, deny):
    browser = Browser()
    current = verification_uri
    entered = confirmed = False
    for _ in range(MAX_STEPS):
        status, location, body = browser.request(current)
        if status in (301, 302, 303, 307, 308) and location:
            current = urllib.parse.urljoin(current, location)
            continue
        if status != 200:
            raise Failure("the provider answered HTTP %d%s" % (status, page_error(body)))
        page = parse(body)
        forms = page.forms
        if any("password" in f["fields"] for f in forms):
            current = log_in(browser, current, body, user)
            continue
        if confirmed or not forms:
            print((page.heading or "").strip(), flush=True)
            return 0
        form = forms[0]
        fields = dict(form["fields"])
        if "user_code" in fields and not entered:
            fields["user_code"] = user_code
            entered = True
        elif any(n == "action" for n, _ in form["submits"]):
            fields["action"] = "deny" if deny else "accept"
            confirmed = True
        else:
            raise Failure("an unexpected form on the device pages%s" % page_error(body))
        action = urllib.parse.urljoin(current, form["action"] or current)
        status, location, body = browser.request(action, fields, referer=current)
        if status not in (301, 302, 303) or not location:
            errors = [line.strip() for line in body.splitlines() if "errorlist" in line]
            raise Failure("the device form was refused (HTTP %d)%s" % (status, (": " + " ".join(errors)) if errors else ""))
        current = urllib.parse.urljoin(action, location)
    raise Failure("too many steps on the device pages")


def main():
    parser = argparse.ArgumentParser(description="A scripted browser for the test provider.")
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("authorize")
    a.add_argument("url")
    a.add_argument("--user", default="alice")
    a.add_argument("--deny", action="store_true")
    a.add_argument("--deliver", action="store_true")
    d = sub.add_parser("device")
    d.add_argument("verification_uri")
    d.add_argument("user_code")
    d.add_argument("--user", default="alice")
    d.add_argument("--deny", action="store_true")
    args = parser.parse_args()
    try:
        if args.command == "authorize":
            return authorize(args.url, args.user, args.deny, args.deliver)
        return device(args.verification_uri, args.user_code, args.user, args.deny)
    except Failure as failure:
        print("browser: %s" % failure, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
