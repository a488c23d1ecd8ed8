"""The stop-string benchmark compares like with like: ours and the plain search hold back the
same text at every token until a stop string occurs."""

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.stop_bench import Ours, PlainSearch


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="ab~", max_size=60),
       stops=st.lists(st.text(alphabet="ab~", min_size=1, max_size=8), min_size=1, max_size=4))
def test_ours_and_the_plain_search_hold_back_the_same_text_until_a_stop_string_occurs(text, stops):
    ours, plain = Ours(stops), PlainSearch(stops)
    for character in text:
        ours.add(character)
        plain.add(character)
        if any(stop in ours.text for stop in stops):
            break
        assert ours.emitted == plain.emitted, ours.text
