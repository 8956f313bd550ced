"""Every implementation of response_template parsing, side by side: the transformers releases, and the
forks vLLM and SGLang ship, each run in its own child process on the same inputs (`matrix`)."""
