"""Pure ranking logic: fusion, calibration, token packing. No I/O; tested with plain lists."""
