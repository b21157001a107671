#!/usr/bin/env python3
"""A user with a passkey in a real browser: headless Chromium (Debian's
chromium and chromium-driver, driven by Selenium) with a WebAuthn virtual
authenticator (CTAP2, internal, resident keys, user verification) on the
hosted page, which runs its own scripts. The page must be served at
http://localhost:PORT (a secure context whose host is a valid RP id).

    passkey-agent.py register AUTHORIZE_URL
        Signs in with a test account (PASSKEY_EMAIL, code PASSKEY_CODE,
        default 000000), adds a passkey on the page, writes the
        authenticator's credentials to PASSKEY_FILE, and continues.
    passkey-agent.py signin AUTHORIZE_URL
        A fresh browser whose authenticator holds the credentials of
        PASSKEY_FILE signs in with "Sign in with a passkey", renames the
        passkey to PASSKEY_RENAME when set, and continues.
        PASSKEY_UV=0: the authenticator does not verify the user; the page's
        answer is reported instead.

Prints `account=EMAIL`, `passkeys=N`, `callback=URL` (the "Return to the app"
link; headless Chromium hands no custom-scheme navigation to the desktop) or
`refused=TEXT` lines on standard output.
"""
import json
import os
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.virtual_authenticator import Credential, VirtualAuthenticatorOptions
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait


def browser(user_verified):
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.binary_location = os.environ.get("PASSKEY_CHROMIUM", "/usr/bin/chromium")
    driver = webdriver.Chrome(
        service=Service(os.environ.get("PASSKEY_CHROMEDRIVER", "/usr/bin/chromedriver")), options=options)
    authenticator = VirtualAuthenticatorOptions()
    authenticator.protocol = VirtualAuthenticatorOptions.Protocol.CTAP2
    authenticator.transport = VirtualAuthenticatorOptions.Transport.INTERNAL
    authenticator.has_resident_key = True
    authenticator.has_user_verification = True
    authenticator.is_user_verified = user_verified
    authenticator.is_user_consenting = True
    driver.add_virtual_authenticator(authenticator)
    return driver


def text_of(driver, element_id):
    return driver.find_element(By.ID, element_id).text.strip()


def continue_to_app(driver, wait):
    wait.until(ready.element_to_be_clickable((By.ID, "continue"))).click()
    link = wait.until(lambda d: d.find_element(By.ID, "return-link").get_attribute("href") or None)
    print("callback=" + link)


def passkey_count(driver):
    return len(driver.find_elements(By.CSS_SELECTOR, "#passkey-list li.passkey"))


def list_ready(driver):
    """The page's passkey list shows its latest answer (no refresh running or due)."""
    return driver.find_element(By.ID, "passkeys").get_attribute("data-state") == "ready"


def register(url):
    driver = browser(True)
    try:
        wait = WebDriverWait(driver, 20)
        driver.get(url)
        wait.until(ready.visibility_of_element_located((By.ID, "email"))).send_keys(os.environ["PASSKEY_EMAIL"])
        driver.find_element(By.CSS_SELECTOR, "#email-form button[type=submit]").click()
        wait.until(ready.visibility_of_element_located((By.ID, "code"))).send_keys(
            os.environ.get("PASSKEY_CODE", "000000"))
        driver.find_element(By.CSS_SELECTOR, "#code-form button[type=submit]").click()
        wait.until(ready.element_to_be_clickable((By.ID, "passkey-add"))).click()
        wait.until(lambda d: passkey_count(d) == 1)
        print("status=" + text_of(driver, "passkey-status"))
        print("account=" + text_of(driver, "account"))
        credentials = [credential.to_dict() for credential in driver.get_credentials()]
        with open(os.environ["PASSKEY_FILE"], "w") as out:
            json.dump(credentials, out)
        print("credentials=%d" % len(credentials))
        continue_to_app(driver, wait)
    finally:
        driver.quit()


def sign_in(url):
    verified = os.environ.get("PASSKEY_UV", "1") != "0"
    driver = browser(verified)
    try:
        with open(os.environ["PASSKEY_FILE"]) as source:
            for credential in json.load(source):
                driver.add_credential(Credential.from_dict(credential))
        wait = WebDriverWait(driver, 20)
        driver.get(url)
        wait.until(ready.element_to_be_clickable((By.ID, "passkey-signin"))).click()
        if not verified:
            refusal = wait.until(lambda d: text_of(d, "passkey-signin-status") or None)
            print("refused=" + refusal)
            return
        wait.until(ready.visibility_of_element_located((By.ID, "confirm")))
        print("account=" + text_of(driver, "account"))
        wait.until(lambda d: list_ready(d) and passkey_count(d) >= 1)
        print("passkeys=%d" % passkey_count(driver))
        rename = os.environ.get("PASSKEY_RENAME")
        if rename:
            field = driver.find_element(By.CSS_SELECTOR, "#passkey-list li.passkey input.passkey-name")
            field.clear()
            field.send_keys(rename)
            driver.find_element(By.CSS_SELECTOR, "#passkey-list li.passkey button.passkey-rename").click()
            wait.until(lambda d: text_of(d, "passkey-status") == "Renamed." and list_ready(d))
            name = driver.find_element(By.CSS_SELECTOR, "#passkey-list li.passkey input.passkey-name")
            print("renamed=" + name.get_attribute("value"))
        continue_to_app(driver, wait)
    finally:
        driver.quit()


def main():
    mode, url = sys.argv[1], sys.argv[2]
    {"register": register, "signin": sign_in}[mode](url)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as error:  # the step, never the URL
        print("passkey-agent: %s: %s" % (type(error).__name__, str(error).splitlines()[0] if str(error) else ""),
              file=sys.stderr)
        sys.exit(1)
