"""Headless Chromium driven by Selenium, for the tests of the explorer's page."""

from __future__ import annotations

import shutil

import pytest

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="chromium and chromium-driver are not installed (.ci/run installs them: apt-get "
           "install chromium chromium-driver)")


def chrome():
    """Headless Chromium driven by Selenium (the caller quits it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1500,900"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def hover_last_row_first_column(driver, wait) -> str:
    """Hover the explorer's heatmap cell of the last row and first column and return Plotly's
    hover text (the cell is found from the plot's own axes, so any size of page works)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    # Offsets from the centre of the plot area (Plotly's drag layer) to the cell's centre.
    offset = driver.execute_script(
        "const gd = document.getElementById('heatmap'), L = gd._fullLayout;"
        "const area = gd.querySelector('.nsewdrag').getBoundingClientRect();"
        "const y = gd.data[0].y.length - 1;"
        "return {x: L.xaxis.l2p(0) - area.width / 2, y: L.yaxis.l2p(y) - area.height / 2};")
    area = driver.find_element(By.CSS_SELECTOR, "#heatmap .nsewdrag")
    ActionChains(driver).move_to_element_with_offset(
        area, round(offset["x"]), round(offset["y"])).perform()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".hoverlayer .hovertext"))
    return driver.find_element(By.CSS_SELECTOR, ".hoverlayer .hovertext").text
