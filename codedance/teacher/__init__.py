"""The expert teacher: a `Policy` that solves world tasks from pixels with CodeDance turns.

See `codedance.teacher.policy` (the decisions), `codedance.teacher.pixels` (the routines its
programs paste), one solver module per skill, and `codedance.teacher.accuracy` (measuring it).
"""

from codedance.teacher.policy import ExpertTeacher, TeacherConfig, TeacherPolicy, turn
from codedance.teacher.view import TaskView

__all__ = ["ExpertTeacher", "TaskView", "TeacherConfig", "TeacherPolicy", "turn"]
