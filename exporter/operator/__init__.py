"""Operator commands: look at and act on transactions (the kafka-transactions.sh verbs)."""
