"""The configured channel layer (Redis when REDIS_URL is set) carries a message between consumers."""

from channels.layers import get_channel_layer


async def test_a_message_sent_to_a_group_reaches_its_member():
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add("generation.test", channel)

    await layer.group_send("generation.test", {"type": "generation.stop", "seen_chars": 12})
    received = await layer.receive(channel)

    await layer.group_discard("generation.test", channel)
    assert received == {"type": "generation.stop", "seen_chars": 12}
