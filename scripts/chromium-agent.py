#!/usr/bin/env python3
"""The demo's user in a real browser: headless Chromium (Debian's chromium and
chromium-driver, driven by Selenium) runs the hosted page's own script. It
signs in with a test account, continues, reads the return URL the page
navigates to from its "Return to the app" link (headless Chromium hands no
custom-scheme navigation to the desktop), and delivers it with `gio open`,
as a desktop browser would.

    chromium-agent.py AUTHORIZE_URL
Environment: DEMO_EMAIL, DEMO_CODE (default 000000), DEMO_LOG, DEMO_DELIVER (default "gio open").
"""
import os
import subprocess
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait


def note(line):
    path = os.environ.get("DEMO_LOG")
    if path:
        with open(path, "a") as log:
            log.write(line + "\n")


def main():
    url = sys.argv[1]
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        wait = WebDriverWait(driver, 20)
        driver.get(url)
        note("chromium: loaded the hosted page (its own script runs)")
        email = wait.until(ready.visibility_of_element_located((By.ID, "email")))
        email.send_keys(os.environ["DEMO_EMAIL"])
        driver.find_element(By.CSS_SELECTOR, "#email-form button[type=submit]").click()
        code = wait.until(ready.visibility_of_element_located((By.ID, "code")))
        code.send_keys(os.environ.get("DEMO_CODE", "000000"))
        driver.find_element(By.CSS_SELECTOR, "#code-form button[type=submit]").click()
        note("chromium: signed in as %s with the test code" % os.environ["DEMO_EMAIL"])
        wait.until(ready.element_to_be_clickable((By.ID, "continue"))).click()
        note("chromium: pressed Continue")
        link = wait.until(lambda d: d.find_element(By.ID, "return-link").get_attribute("href") or None)
        if "code=" not in link:
            raise RuntimeError("the page did not offer a return URL with a code")
    finally:
        driver.quit()
    deliver = os.environ.get("DEMO_DELIVER", "gio open").split()
    status = subprocess.call(deliver + [link], stdout=subprocess.DEVNULL)
    note("user agent: handed the return URL to the desktop (%s), exit %d" % (" ".join(deliver), status))
    return 0 if status == 0 else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as error:  # report the step, never the URL
        note("user agent: failed: %s" % type(error).__name__)
        print("chromium-agent: %s" % type(error).__name__, file=sys.stderr)
        sys.exit(1)
