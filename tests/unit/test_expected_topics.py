"""Topics the exporter expects in the metadata: the ones the config names, and
``__transaction_state``; a refusal to describe one is a named error, and without
``__transaction_state`` the listing of transactional ids cannot be proven complete."""

from __future__ import annotations

from exporter.config.model import TopicFilter
from exporter.model import TRANSACTION_STATE_TOPIC, Broker, ClusterSnapshot, CollectionError
from exporter.pipeline.compute import listing_incomplete


def test_named_topics_are_the_allow_patterns_that_are_plain_names() -> None:
    topics = TopicFilter(allow=("orders", "billing.v1", "payments-.*", "[a-z]+"), deny=("billing.v1",))
    assert topics.named_topics() == ("orders",)


def test_the_default_filter_names_no_topic() -> None:
    assert TopicFilter().named_topics() == ()


def snapshot(*errors: CollectionError) -> ClusterSnapshot:
    return ClusterSnapshot(
        cluster="c",
        taken_at_ms=0,
        brokers=(Broker(1, "b1", 9092),),
        coordinators_listed=frozenset({1}),
        errors=errors,
    )


def test_a_complete_listing_is_trusted() -> None:
    assert not listing_incomplete(snapshot())


def test_a_refused_transaction_state_topic_makes_the_listing_unproven() -> None:
    refused = CollectionError("Metadata", "TOPIC_AUTHORIZATION_FAILED", topic=TRANSACTION_STATE_TOPIC)
    assert listing_incomplete(snapshot(refused))


def test_a_refused_monitored_topic_does_not_touch_the_listing() -> None:
    refused = CollectionError("Metadata", "TOPIC_AUTHORIZATION_FAILED", topic="orders")
    assert not listing_incomplete(snapshot(refused))
