"""A manager brings a team's ADR folder in through the browser: upload, read, apply."""

import pytest
from playwright.sync_api import expect

from decisions.models import Decision
from tests.interop.test_import import FIXTURES, zipped
from tests.ui.conftest import pytestmark as needs_chromium

pytestmark = [needs_chromium, pytest.mark.django_db(transaction=True)]


def test_a_manager_checks_an_adr_folder_then_applies_it(
    page, live_server, flow, login, shoot, tmp_path
):
    archive = tmp_path / "adrs.zip"
    archive.write_bytes(zipped(FIXTURES / "madr" / "adr-madr"))
    login(page, flow.manager)

    page.click("nav >> text=Imports")
    page.select_option("#id_format", "madr")
    page.set_input_files("#id_file", str(archive))
    page.click("#import-form button[type=submit]")
    expect(page.locator("#summary")).to_contain_text("19 created · 0 updated · 0 unchanged")
    expect(page.locator("#notices")).to_contain_text("no status")
    shoot(page, "import-checked")
    assert Decision.objects.count() == 0
    page.click("#apply")

    expect(page.locator(".messages")).to_contain_text("applied: 19 created, 0 updated")
    assert Decision.objects.filter(project=flow.project, origin__startswith="madr:").count() == 19
    shoot(page, "import-applied")
