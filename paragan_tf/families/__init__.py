"""GAN families as named plugins (docs/families.md).

contract (what a family is: Family, Objective, NoBlocks) · registry (families by name;
`family.name`, the data's kind's default) · biggan, pix2pix (the built-in families, one
package each: networks, objective, the family itself, and pix2pix's losses, evaluator,
test-time mode and export). Importing this package registers the built-in families; a
user's own registers itself as its module is imported (a gin file's `import` line).
"""

from paragan_tf.families.registry import (AUTO, FamilyConfig, configurables,  # noqa: F401
                                          family_class, names, register, resolve)
from paragan_tf.families import biggan  # noqa: F401,E402  (registers it)
from paragan_tf.families import pix2pix  # noqa: F401,E402  (registers it)
