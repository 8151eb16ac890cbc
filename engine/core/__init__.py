"""The exact core: what the engine computes from rows of log-probabilities, whichever backend
gives them. The covering search over the vocabulary index (covering, vocab, prefix), sampling
(sampler, speculative), the sequence that drives one pass (sequence), stop rules (stops), the
prompt's token layout (prompt), the gate's signals (signals), the document-word choice
(word_choice) and the other first words (alternatives). Nothing here loads a model or opens a
connection.
"""
