"""WebShop (Yao et al., 2022) as one ``gymnasium.make("ptgpo/WebShop-v0")``: text mode, BM25 search,
the original reward, the original data when given (``data_path``) or a bundled catalogue."""

from ptgpo_envs.webshop.env import WebShopEnv

__all__ = ["WebShopEnv"]
