"""Harnesses that benchmarks and tests share: they run the product itself (the real
``bot.service.Service``, a front end, or ``hugginggpt`` processes) on the stand-in backends of
:mod:`sandbox`, so they import ``bot/`` and ``adapters/`` and cannot live in ``sandbox/`` (which
imports neither). Tests import them from here; nothing here imports ``tests/``.

- :mod:`.slack`: the Service on sandbox backends and the Slack bolt app served over HTTP next to
  the stand-in Slack;
- :mod:`.slack_replicas`: several ``hugginggpt slack --mode http`` processes on one store;
- :mod:`.http_server`: the HTTP API served by uvicorn on 127.0.0.1 over the sandbox backends;
- :mod:`.realparts`: real parts started on 127.0.0.1 in a temp dir (a throwaway PostgreSQL and nginx
  from the system's packages), not stand-ins, and not shipped with the product;
- :mod:`.tinymodels`: tiny real checkpoints built with the libraries' config classes (torch and
  transformers are imported inside its functions only);
- :mod:`.crafted_files`: hostile PDFs and videos built in memory.
"""
