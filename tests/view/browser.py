"""Real headless Chromium for report tests, installed by the tests themselves when missing.

Debian's ``chromium`` and ``chromium-driver`` packages (apt-get, as root on the project's
machines and CI); Selenium drives them through ``/usr/bin/chromedriver``, so Selenium
Manager never downloads a browser or driver of its own.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1300,1000",
)


def _apt_install() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium", "chromium-driver"],
        capture_output=True,
        text=True,
        env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )


def ensure_chromium() -> None:
    """Install Debian's chromium and chromium-driver unless both are there."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    if shutil.which("apt-get") is None:
        raise RuntimeError("chromium is missing and there is no apt-get to install it")
    done = _apt_install()
    if done.returncode != 0:  # a fresh machine has no package lists yet
        subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True)
        done = _apt_install()
    if done.returncode != 0 or not CHROMEDRIVER.exists():
        raise RuntimeError(f"apt-get could not install chromium: {done.stderr.strip()[-500:]}")


@contextmanager
def chromium(user_data_dir: Path) -> Iterator[Any]:
    """A Selenium driver on a fresh headless Chromium profile; quit on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    ensure_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={user_data_dir}")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_rendered(driver: Any, timeout: float = 60.0) -> None:
    """Until the page script has drawn every chart (it marks <body data-rendered="yes">)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(
        lambda d: d.execute_script("return document.body.dataset.rendered") == "yes"
    )


def full_page_screenshot(driver: Any, path: Path) -> None:
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1300, min(int(height), 12000))
    driver.save_screenshot(str(path))
