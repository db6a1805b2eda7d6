"""Real inference engines that SlidingServe's policies can drive (the simulator is in `sim`)."""
