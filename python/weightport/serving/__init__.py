"""What the serving-engine backends (:mod:`weightport.vllm`, :mod:`weightport.sglang`) share, needing
only torch: the placement dry run (:mod:`.placement`, :mod:`.dry_run`), the shadow layers a version
is built into and swapped in from (:mod:`.shadow`), and the "version built" notices a worker sends
its trainer (:mod:`.ready`)."""
