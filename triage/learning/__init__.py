"""The learned proposer: a classifier per queue, trained on issues whose labels are final.

`features` turns an issue into the classifier's inputs, `training` fits and scores a model,
`store` keeps its versions in the database, `proposer` proposes with it beside the rules.
"""
