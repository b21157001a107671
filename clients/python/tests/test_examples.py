"""The examples of docs/apps/python.md run as a user would run them."""

import os
import subprocess
import sys
import tempfile
import unittest

from browser_login import Broker

from .support import CLIENT, EMAIL, PACKAGE_ROOT, live


def run_example(name):
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT))
    with tempfile.TemporaryDirectory() as cwd:
        return subprocess.run(
            [sys.executable, str(PACKAGE_ROOT / "examples" / name), CLIENT], cwd=cwd, env=env,
            capture_output=True, text=True, timeout=120,
        )


@live
class ExampleTests(unittest.TestCase):
    def setUp(self):
        with Broker() as broker:
            broker.sign_out(CLIENT)

    def test_sign_in(self):
        done = run_example("sign_in.py")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("Continue in your browser to sign in.", done.stdout)
        self.assertIn(f"Signed in as {EMAIL}", done.stdout)
        self.assertIn(f"GET /api/me: 200 {EMAIL}", done.stdout)
        self.assertIn("POST /api/notes: 201 hello from Python", done.stdout)
        self.assertNotIn("http", done.stdout, "no link is shown when the browser opened")

        again = run_example("sign_in.py")  # already signed in: no new sign-in
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertNotIn("Continue in your browser", again.stdout)

    def test_sign_in_async(self):
        done = run_example("sign_in_async.py")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("sign-in completed", done.stdout)
        self.assertIn(f"Signed in as {EMAIL}", done.stdout)
        self.assertIn(f"GET /api/me: 200 {EMAIL}", done.stdout)

    def test_an_error_is_reported_with_its_code(self):
        env = dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT))
        done = subprocess.run(
            [sys.executable, str(PACKAGE_ROOT / "examples" / "sign_in.py"), "com.example.no-such-client"],
            env=env, capture_output=True, text=True, timeout=60,
        )
        self.assertEqual(done.returncode, 1)
        self.assertIn("[CLIENT_UNKNOWN]", done.stderr)


if __name__ == "__main__":
    unittest.main()
