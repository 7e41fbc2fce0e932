"""Chapter 8's readings: the paired difference, the local exponent and the decomposition of the gap."""
import numpy as np
import pytest

from softmax_as_linear.experiments import nonlinear_reading

SETTINGS = [(1.0, 0.05), (4.0, 0.05), (2.0, 0.25)]


def _windows():
    # large seed effects shared by every setting, so that pairing matters: seed effect + setting effect + small noise
    rng = np.random.default_rng(0)
    seed_effect = rng.normal(0, 20, 6)
    setting_effect = np.array([30.0, 150.0, 40.0])
    return setting_effect[:, None] + seed_effect[None, :] + rng.normal(0, 0.5, (3, 6))


def test_paired_difference_agrees_with_a_direct_computation():
    w = _windows()
    mean, se = nonlinear_reading.paired_difference(w, SETTINGS, (4.0, 0.05), (1.0, 0.05))
    d = w[1] - w[0]
    assert mean == pytest.approx(d.mean()) and se == pytest.approx(d.std(ddof=1) / np.sqrt(d.size))
    assert abs(mean - 120) < 4 * se and se < 1, "pairing removes the seed effects"


def test_paired_difference_fails_when_its_sign_is_flipped_or_its_pairing_broken():
    w = _windows()
    mean, _ = nonlinear_reading.paired_difference(w, SETTINGS, (1.0, 0.05), (4.0, 0.05))
    assert mean < 0, "the order of the settings is the sign of the difference"
    broken = w.copy()
    broken[1] = broken[1][::-1]       # the same values, seeds no longer paired
    _, se_broken = nonlinear_reading.paired_difference(broken, SETTINGS, (4.0, 0.05), (1.0, 0.05))
    _, se = nonlinear_reading.paired_difference(w, SETTINGS, (4.0, 0.05), (1.0, 0.05))
    assert se_broken > 10 * se


def test_paired_difference_names_bad_input():
    with pytest.raises(ValueError, match="first"):
        nonlinear_reading.paired_difference(_windows(), SETTINGS, (8.0, 0.05), (1.0, 0.05))
    with pytest.raises(ValueError, match="values"):
        nonlinear_reading.paired_difference(_windows()[:2], SETTINGS, (4.0, 0.05), (1.0, 0.05))


def test_local_exponent_reads_a_power_law():
    lengths = [10, 100, 1000]
    w = np.array([[2 * L**0.4 for L in lengths], [5 * L**0.1 for L in lengths]])
    np.testing.assert_allclose(nonlinear_reading.local_exponent(lengths, w, 0, 2), [0.4, 0.1])
    np.testing.assert_allclose(nonlinear_reading.local_exponent(lengths, w, 1, 2), [0.4, 0.1])
    with pytest.raises(ValueError, match="positive"):
        nonlinear_reading.local_exponent(lengths, -w, 0, 2)


def test_gap_decomposition_adds_up():
    linear, softmax = np.array([0.40, 0.36]), np.array([0.07, 0.03])
    parts = nonlinear_reading.gap_decomposition(linear, softmax, 0.337, 0.2375)
    np.testing.assert_allclose(parts["linear_excess"] + parts["intercept"] + parts["locality"], linear - softmax)
    np.testing.assert_allclose(parts["intercept"], 0.0995)
    np.testing.assert_allclose(parts["locality"], [0.1675, 0.2075])
