"""Measuring the machine at hand into the calibration format (`repro profile`): torch work, apart from reading a calibration."""
