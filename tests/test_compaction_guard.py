"""When the last compaction left the context over the threshold (its kept steps alone are that large), the next
one waits until those steps are replaced, unless the window would run out first: then not even a compaction
request fits (the example through the double with the API compactor overflowed so, two steps after one)."""

from context.policy import Policy

POLICY = Policy(window=24_000, threshold=18_000, max_tokens=2_048, keep_last_steps=5)  # Execute's, demo profile
STILL_OVER = 18_219  # what the last compaction left: over the threshold


def test_a_compaction_that_got_under_the_threshold_lets_the_next_one_come_when_due():
    assert POLICY.may_compact_again(12_000, 1, 18_500)
    assert POLICY.may_compact_again(None, 1, 18_500)


def test_after_one_that_could_not_it_waits_for_the_kept_steps_to_be_replaced():
    assert not POLICY.may_compact_again(STILL_OVER, 1, 19_837)
    assert POLICY.may_compact_again(STILL_OVER, 5, 19_837)  # five new steps replaced the kept five


def test_but_not_until_the_window_has_no_room_for_two_more_replies():
    assert POLICY.may_compact_again(STILL_OVER, 2, 21_480)  # 21,480 + 2 x 2,048 > 24,000
    assert not POLICY.may_compact_again(STILL_OVER, 2, 24_000 - 2 * 2_048)
