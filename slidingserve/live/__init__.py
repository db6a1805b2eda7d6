"""Live comparisons: real vLLM servers, one policy at a time, measured by `slidingserve.bench`."""
