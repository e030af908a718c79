"""The doctor's checks, one link of the chain each, one module each.

Each module has one function, ``examine``, from the shared
:class:`~gfd.doctor.examination.Examination` to an :class:`~gfd.doctor.finding.Answer`,
and the registry (:data:`gfd.doctor.registry.DOCTOR_CHECKS`) names it. A check never
imports another: what one link found that the next needs lives in the examination.
"""
