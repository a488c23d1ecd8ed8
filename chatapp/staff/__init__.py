"""staff: the pages and upkeep only staff see: the audit report, its charts, the daily rollups,
retention's purge and the live view of the answers streaming now.

Its reads cross every owner, so they are its own (selectors.py), and so are its writes
(services.py: rollups saved, expired rows purged). It may import the conversation core (models,
services, selectors, errors), runtime/, the SSE writer of streaming/ and the replica figures of
upstream/; nothing in the other rooms imports it, only the core's doors (api, urls, tasks).
"""
