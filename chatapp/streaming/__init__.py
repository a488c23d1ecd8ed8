"""streaming: one answer's stream from the upstream to the browser, and the streams that watch it.

Here live the relay (reads the upstream, persists, writes events), the answer's start with the
prompt that fits the model's context (prompt_fit, and what earlier counts taught: token_memory),
the backlog that joins deltas while the browser is slow, the partial saves written together, the
answer's live channel (its deltas by offset, over the channel layer) and the hub that shares it
among a process's watchers, the watch stream another page follows or its own page resumes, and
the SSE writer for all of them. It may import the conversation core (models, services,
selectors, errors), upstream/ and runtime/; nothing imports it but the core's doors (api, views,
urls, tasks) and staff/ (for the SSE writer).
"""
