"""The planning benchmark behind ``hugginggpt eval taskbench``: TaskBench's data and tool names
(:mod:`.taskbench`), its metrics (:mod:`.metrics`), planning every request through the real task
planning stage with a cache (:mod:`.runner`), and the report (:mod:`.report`)."""
