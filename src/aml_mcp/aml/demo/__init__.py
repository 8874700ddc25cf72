"""The synthetic demo banks: templated notes of several typologies, loaded on a first start."""
