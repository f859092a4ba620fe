"""Task execution's experts (HuggingGPT §3.3): runners behind one protocol
(:class:`pipeline.experts.base.ExpertRunner`).

* :mod:`.hub`: Hugging Face models through Inference Providers, dedicated endpoints or a gateway;
* :mod:`.routing`: one model across the team's expert servers first, then its provider (the
  hybrid inference endpoint; the runner the pipeline uses for Hugging Face models);
* :mod:`.controller`: text tasks the controller LLM serves itself;
* :mod:`.local`: tasks computed in-process (canny edge maps);
* :mod:`.render`: pictures people can open (boxes, masks, depth maps).

Import the submodule you need; this package imports none of them, so the task registry can use
:mod:`.render` without importing the runners.
"""
