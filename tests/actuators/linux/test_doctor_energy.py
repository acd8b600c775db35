"""`tuner doctor`'s energy sources side by side: a BMC (a real ipmi_sim) and RAPL over a fake powercap tree."""

from __future__ import annotations

from actuators.linux.doctor import summarize
from actuators.linux.doctor_energy import check_energy_sources
from actuators.linux.findings import OK
from actuators.linux.hwio import HardwareIO
from tests import fakefs


def test_a_bmc_and_rapl_are_read_side_by_side_with_their_gap(tmp_path, fake_bmc):
    fakefs.powercap_zone(tmp_path, "package-0", "intel-rapl:0", 0, 1 << 40)
    specs = [("energy", fake_bmc.reader_options()), ("energy_compare[0]", {"kind": "rapl"})]
    findings = check_energy_sources(HardwareIO(tmp_path, dry_run=True), specs, seconds=0.4)
    by = {f.check: f for f in findings}
    assert by["energy"].status == OK and "ipmi (platform; updates every 0.2 s" in by["energy"].detail
    assert "150.0 W now (energy)" in by["energy"].detail
    assert by["energy-compare"].status == OK and "rapl (package-0" in by["energy-compare"].detail
    assert "side by side: ipmi 150.0 W, rapl 0.0 W; rapl - ipmi = -150.0 W" in by["energy-gap"].detail
    assert "energy" not in summarize(findings).missing  # a reading BMC stands in for RAPL


def test_a_bad_table_fails_naming_its_field(tmp_path):
    findings = check_energy_sources(HardwareIO(tmp_path, dry_run=True), [("energy", {"kind": "snmp"})], seconds=0.1)
    assert [(f.check, f.status) for f in findings] == [("energy", "fail")]
    assert findings[0].detail.startswith("energy.kind: 'snmp'")
