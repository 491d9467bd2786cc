"""Verifiers trained and scored on one frozen body's stored states: heads (ORM, MC-label and exact-label PRMs), a companion head, and a PRM and its companion scored in one tree pass."""
