"""What needs no broker: the error table, the views, the plans."""

import re
import unittest
from datetime import datetime, timezone

import browser_login
from browser_login import _core, _views
from browser_login._errors import error_from_rpc

from .support import REPO_ROOT


class ErrorTableTests(unittest.TestCase):
    def test_every_code_of_the_docs_has_a_class(self):
        rpc_md = REPO_ROOT / "docs" / "rpc.md"
        if not rpc_md.exists():
            self.skipTest("docs/rpc.md is not here (the package was copied out of the repository)")
        text = rpc_md.read_text(encoding="utf-8")
        table = text[text.index("| `data.code` |"):]
        table = table[: table.index("\n\n")]
        codes = re.findall(r"^\| `([A-Z_]+)` \|", table, flags=re.MULTILINE)
        self.assertGreater(len(codes), 20, "the error table of docs/rpc.md was not found")
        self.assertEqual(sorted(codes), sorted(browser_login.ERROR_CLASSES))

    def test_each_class_is_exported_and_carries_its_code(self):
        for code, cls in browser_login.ERROR_CLASSES.items():
            self.assertIs(getattr(browser_login, cls.__name__), cls)
            self.assertTrue(issubclass(cls, browser_login.BrowserLoginError))
            error = error_from_rpc({"code": -32000, "message": "m", "data": {"code": code, "attemptId": "at_1"}})
            self.assertIs(type(error), cls)
            self.assertEqual((error.code, error.message, str(error), error.attempt_id), (code, "m", "m", "at_1"))

    def test_an_unknown_code_is_still_a_browser_login_error(self):
        error = error_from_rpc({"code": -32000, "message": "later", "data": {"code": "SOMETHING_NEW"}})
        self.assertIs(type(error), browser_login.BrowserLoginError)
        self.assertEqual(error.code, "SOMETHING_NEW")

    def test_json_rpc_errors_are_protocol_errors_named_by_code(self):
        names = {-32700: "PARSE_ERROR", -32600: "INVALID_REQUEST", -32601: "METHOD_NOT_FOUND",
                 -32602: "INVALID_PARAMS", -32603: "INTERNAL_ERROR"}
        for number, name in names.items():
            error = error_from_rpc({"code": number, "message": "m"})
            self.assertIsInstance(error, browser_login.ProtocolError)
            self.assertEqual((error.code, error.rpc_code), (name, number))

    def test_a_busy_line_with_a_null_id_is_an_orphan(self):
        line = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"busy","data":{"code":"BUSY"}}}'
        incoming = _core.decode_line(line)
        self.assertIsInstance(incoming, _core.Orphan)
        self.assertIsInstance(incoming.error, browser_login.BusyError)


ATTEMPT = {
    "attemptId": "at_1", "client": "c", "state": "waiting", "createdAt": "2026-12-01T10:00:00.000Z",
    "expiresAt": None, "updatedAt": "2026-12-01T10:00:01.500Z", "error": None, "receipt": None,
    "reconciled": True, "authorizeUrl": "https://login.example/authorize?state=private",
    "somethingNew": {"a": 1},
}


class ViewTests(unittest.TestCase):
    def test_unknown_members_are_ignored_and_times_are_utc(self):
        attempt = _views.parse_attempt(ATTEMPT)
        self.assertEqual(attempt.state, "waiting")
        self.assertEqual(attempt.updated_at, datetime(2026, 12, 1, 10, 0, 1, 500000, tzinfo=timezone.utc))
        self.assertIsNone(attempt.expires_at)
        self.assertFalse(attempt.final)

    def test_the_authorize_url_stays_out_of_repr(self):
        attempt = _views.parse_attempt(ATTEMPT)
        self.assertEqual(attempt.authorize_url, ATTEMPT["authorizeUrl"])
        self.assertNotIn("private", repr(attempt))

    def test_views_are_frozen(self):
        session = _views.parse_session({"client": "c", "status": "signedOut", "account": None, "future": 1})
        with self.assertRaises(Exception):
            session.status = "signedIn"  # type: ignore[misc]

    def test_a_malformed_view_is_a_protocol_error(self):
        with self.assertRaises(browser_login.ProtocolError) as caught:
            _views.parse_session({"status": "signedIn"})
        self.assertEqual(caught.exception.code, "INVALID_REPLY")

    def test_response_body_from_text_or_base64(self):
        text = _views.parse_response(
            {"status": 200, "headers": {"Content-Type": "application/json"}, "body": '{"a":1}'})
        self.assertEqual((text.headers, text.json(), text.text, text.ok),
                         ({"content-type": "application/json"}, {"a": 1}, '{"a":1}', True))
        raw = _views.parse_response({"status": 404, "headers": {}, "bodyBase64": "AAE="})
        self.assertEqual((raw.body, raw.ok), (b"\x00\x01", False))


def drive(plan, answer):
    """Run a plan with `answer(call)` standing in for the broker; the calls and the result."""
    calls = []
    try:
        call = next(plan)
        while True:
            calls.append(call)
            try:
                result = answer(call)
            except browser_login.BrowserLoginError as error:
                call = plan.throw(error)
            else:
                call = plan.send(result)
    except StopIteration as stop:
        return calls, stop.value


class PlanTests(unittest.TestCase):
    def test_a_long_wait_is_several_calls_of_at_most_300_s(self):
        now = [0.0]

        def answer(call):
            now[0] += call.params["timeoutMs"] / 1000
            raise browser_login.WaitTimeoutError("the broker's words", data={"code": "WAIT_TIMEOUT"})

        with self.assertRaises(browser_login.WaitTimeoutError) as caught:
            drive(_core.wait("c", 700, clock=lambda: now[0]), answer)
        self.assertIn("700 s", caught.exception.message)
        self.assertEqual(now[0], 700)

    def test_a_wait_returns_the_session_of_the_call_that_saw_it(self):
        answers = iter([browser_login.WaitTimeoutError("t"), {"client": "c", "status": "signedIn"}])

        def answer(call):
            value = next(answers)
            if isinstance(value, Exception):
                raise value
            return call.decode(value)

        calls, session = drive(_core.wait("c", 400, clock=lambda: 0.0), answer)
        self.assertEqual([c.params["timeoutMs"] for c in calls], [300000, 300000])
        self.assertTrue(session.signed_in)

    def test_request_params(self):
        calls, _ = drive(_core.request("c", "post", "/api/notes", None, None, None, {"text": "hi"}, True, 2.5),
                         lambda call: None)
        self.assertEqual(calls[0].params, {
            "client": "c", "method": "POST", "path": "/api/notes", "headers": {"Content-Type": "application/json"},
            "body": '{"text":"hi"}', "timeoutMs": 2500})
        calls, _ = drive(_core.request("c", "PUT", "/f", {"q": "1"}, {"content-type": "text/plain"}, b"\xff", None,
                                       False, None), lambda call: None)
        self.assertEqual(calls[0].params["bodyBase64"], "/w==")
        self.assertEqual(calls[0].params["query"], {"q": "1"})
        with self.assertRaises(ValueError):
            drive(_core.request("c", "POST", "/", None, None, "x", {}, True, None), lambda call: None)

    def test_an_activation_token_is_sent_only_when_given(self):
        calls, _ = drive(_core.start("c", True, False, None, False, "wl-tok_1"), lambda call: None)
        self.assertEqual(calls[0].params["activationToken"], "wl-tok_1")
        calls, _ = drive(_core.start("c", True, False, None, False), lambda call: None)
        self.assertNotIn("activationToken", calls[0].params)
        calls, _ = drive(_core.resume("at_1", True, "x11-id_TIME1"), lambda call: None)
        self.assertEqual(calls[0].params, {"attemptId": "at_1", "openBrowser": True, "activationToken": "x11-id_TIME1"})
        calls, _ = drive(_core.resume("at_1", False), lambda call: None)
        self.assertEqual(calls[0].params, {"attemptId": "at_1", "openBrowser": False})

    def test_the_socket_path_rule(self):
        import os
        from unittest import mock

        with mock.patch.dict(os.environ, {"BROWSER_LOGIN_SOCKET": "", "XDG_RUNTIME_DIR": "/run/user/7"}):
            self.assertEqual(_core.socket_path(), "/run/user/7/browser-login/broker.sock")
            self.assertEqual(_core.socket_path("/x.sock"), "/x.sock")
        with mock.patch.dict(os.environ, {"BROWSER_LOGIN_SOCKET": "/b.sock"}):
            self.assertEqual(_core.socket_path(), "/b.sock")
        with mock.patch.dict(os.environ, {"BROWSER_LOGIN_SOCKET": "", "XDG_RUNTIME_DIR": ""}):
            with self.assertRaises(browser_login.BrokerNotRunningError):
                _core.socket_path()


class DocsTests(unittest.TestCase):
    def setUp(self):
        page = REPO_ROOT / "docs" / "apps" / "python.md"
        if not page.exists():
            self.skipTest("docs/apps/python.md is not here (the package was copied out of the repository)")
        self.page = page.read_text(encoding="utf-8")

    def test_the_page_shows_the_tested_example_verbatim(self):
        from .support import PACKAGE_ROOT

        example = (PACKAGE_ROOT / "examples" / "sign_in.py").read_text(encoding="utf-8")
        self.assertIn("```python\n" + example + "```", self.page)

    def test_the_page_lists_every_error_class(self):
        names = [name for name in browser_login.__all__
                 if isinstance(getattr(browser_login, name), type)
                 and issubclass(getattr(browser_login, name), browser_login.BrowserLoginError)]
        self.assertGreater(len(names), 28)
        missing = [name for name in names if f"| `{name}` |" not in self.page]
        self.assertEqual(missing, [], "error classes missing from the table of docs/apps/python.md")


if __name__ == "__main__":
    unittest.main()
