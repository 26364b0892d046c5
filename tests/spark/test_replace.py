"""The key-only write's decision, without Spark: which staged keys it replaces, and the counts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mvlog.spark.replace import classify, naming

keys = st.tuples(st.none() | st.integers(0, 9), st.sampled_from(["a", "b", None]))
hashes = st.none() | st.integers(0, 3)


@given(new=st.dictionaries(keys, hashes, max_size=30), stored=st.dictionaries(keys, st.integers(0, 3), max_size=30))
def test_classify_applies_the_staged_keys_as_a_merge_would(new, stored):
    """The table after the write (stored rows of keys not replaced, plus the new rows of replaced
    keys) is what a MERGE leaves, and the counts are the MERGE's."""
    changes = classify(new, stored)
    after = {k: h for k, h in stored.items() if k not in changes.keys}
    after.update({k: new[k] for k in changes.keys if new[k] is not None})
    merged = {k: h for k, h in stored.items() if k not in new or new[k] is not None}
    merged.update({k: h for k, h in new.items() if h is not None})
    assert after == merged
    assert changes.inserted == sum(1 for k, h in new.items() if h is not None and k not in stored)
    assert changes.deleted == sum(1 for k, h in new.items() if h is None and k in stored)
    assert changes.updated == sum(1 for k, h in new.items() if h is not None and k in stored and stored[k] != h)
    assert set(changes.unchanged) == {k for k, h in new.items() if k in stored and stored[k] == h}
    assert not set(changes.unchanged) & set(changes.keys)  # an unchanged row is not rewritten


@given(table=st.sets(keys, max_size=30), staged=st.sets(keys, min_size=1, max_size=10),
       spread=st.integers(1, 40), data=st.data())
def test_tuple_hashes_name_exactly_the_keys_replaced_or_are_not_used(table, staged, spread, data):
    """A hash of few values (``spread``) collides often: the write's predicate (by hash where
    :func:`naming` allows, else by the tuples) selects exactly the rows of the keys it replaces,
    among the rows the lookup found and every other row of the table."""
    def tuple_hash(key):
        return hash(key) % spread

    hashes = {key: tuple_hash(key) for key in staged}
    named = naming(hashes)
    found = {k for k in table if (tuple_hash(k) in set(named.values()) if named is not None else k in staged)}
    exact = naming(named, found) if named is not None else None
    replaced = data.draw(st.sets(st.sampled_from(sorted(staged, key=repr))))
    if exact is not None:
        chosen = {exact[k] for k in replaced}
        selected = {k for k in table if tuple_hash(k) in chosen}
    else:
        selected = table & replaced
    assert selected == table & replaced
