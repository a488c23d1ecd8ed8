"""upstream: talking to the inference service, one replica or several.

Here live the streaming client and its failover between replicas, the replicas' load read in
the background, the figures the live view shows per replica, the SSE reader, titles (a short
request of their own to the same replicas, passed on by the same refusal rules), and what the
upstream says of prompts (its context, a prompt's token count: token_counts). It may import the
conversation core (models, services, selectors, errors) and runtime/; never streaming/ or
staff/, which import it.
"""
