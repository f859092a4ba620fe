"""TaskBench's two tool lists as shipped (``tool_desc.json`` of ``data_huggingface`` and
``data_multimedia``, microsoft/JARVIS ``taskbench/``, MIT licence), read by
:mod:`hugginggpt.evaluation.toollist`."""
