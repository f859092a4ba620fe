"""The model catalog: where model selection (HuggingGPT §3.2) finds its candidates.

* :mod:`.models`: :class:`Catalog` and :class:`ModelCard`, loading and ranking by downloads;
* :mod:`.availability`: :class:`Availability`, which models the configured backends serve now;
* :mod:`.servers`: :class:`~.servers.ExpertServers`, what the team's expert servers list now;
* :mod:`.placement`: :class:`~.placement.Placement`, candidates with where they run (local first);
* :mod:`.refresh`: the Hub crawl behind ``hugginggpt catalog refresh``.
"""

from .availability import Availability
from .models import SHIPPED_CATALOG, Catalog, ModelCard, card_from_record, clean_tags, condense_description

__all__ = ["SHIPPED_CATALOG", "Availability", "Catalog", "ModelCard", "card_from_record", "clean_tags", "condense_description"]
